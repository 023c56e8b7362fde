package settletest

import "context"

// Pause pauses the mounts reading m, as an operator pauses a Redis source with
// settle/admin: within a second of the App's clock they read nothing new, and finish
// and settle what they hold.
func (m *Memory) Pause() { m.setPaused(true) }

// Resume resumes the mounts reading m (see Pause).
func (m *Memory) Resume() { m.setPaused(false) }

func (m *Memory) setPaused(p bool) {
	m.mu.Lock()
	m.paused = p
	m.mu.Unlock()
}

// Paused reports whether the Memory is paused (see Memory.Pause).
func (t *memoryTransport) Paused(context.Context) (bool, error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.m.paused, nil
}
