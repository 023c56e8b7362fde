package admin

// CheckSlots makes i refuse replays across cluster slots as it does on a cluster, so
// that tests on one server can see the refusal.
func CheckSlots(i *Inspector) { i.checkSlots = true }
