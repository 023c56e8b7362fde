// Package redisbase holds what settle's Redis transports (internal/redisstream,
// internal/redislist, internal/redispubsub) share: the durable delay set, the ACL
// preflight, replica waits, envelope reading, delivery ids, consumer names and the pause
// key.
//
// Its rule: nothing in it knows a transport's type. A helper takes the values it works
// on (a client, a key, a group, a list of commands); what is one transport's alone
// stays in that transport's package, and what two of them need comes here.
package redisbase
