package ucm

// Default limits: far above what libibcm clients use (a handful of ids,
// a few queued events), low enough that one client cannot grow the daemon
// without bound. The kernel had no such limits.
const (
	DefaultMaxIDs    = 1 << 16
	DefaultMaxEvents = 1 << 16
)

// Limits bound what one open file may hold. Exceeding one fails the
// command with ENOMEM, the kernel's answer to a failed allocation; a REQ
// that cannot be queued is rejected and other events are dropped (design.md
// rule 7).
type Limits struct {
	// MaxIDs is the most ids a file may have, counting new connections
	// not yet delivered. 0 means DefaultMaxIDs.
	MaxIDs int
	// MaxEvents is the most undelivered events a file may queue.
	// 0 means DefaultMaxEvents.
	MaxEvents int
}

func (l Limits) withDefaults() Limits {
	if l.MaxIDs <= 0 {
		l.MaxIDs = DefaultMaxIDs
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultMaxEvents
	}
	return l
}
