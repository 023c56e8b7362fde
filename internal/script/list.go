package script

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed list_move.lua
var listMoveSrc string

// ListMove takes an item out of a reliable list consumer's processing list and pushes a
// value to a list, only if the item was there (see list_move.lua).
//
//	KEYS: processing list, destination list
//	ARGV: item, value to push
//	reply: 1 moved, 0 item gone
var ListMove = redis.NewScript(listMoveSrc)

//go:embed list_recover.lua
var listRecoverSrc string

// ListRecover moves the items of a dead reliable list consumer back to the list or to
// the dead-letter list, only while its heartbeat is absent (see list_recover.lua).
//
//	KEYS: heartbeat, processing list, source list, dead-letter list, consumer set
//	ARGV: check heartbeat ("1"/"0"), consumer name, (item, "list"|"dead"|"drop", value)…
//	reply: -1 alive, else items taken
var ListRecover = redis.NewScript(listRecoverSrc)
