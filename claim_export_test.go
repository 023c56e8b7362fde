package settle

// SetClaimingOnBeat makes s call f after each heartbeat of its subscription (tests only).
func SetClaimingOnBeat(s *ClaimingStreamSource, f func()) { s.onBeat = f }
