package settle

// Log attribute keys, shared by every transport.
const (
	attrAction  = "action"
	attrAttempt = "attempt"
	attrDelay   = "delay"
	attrError   = "error"
	attrGroup   = "group"
	attrKey     = "key"
	attrMount   = "mount"
	attrMsgID   = "msg_id"
	attrOutcome = "outcome"
	attrReason  = "reason"
)
