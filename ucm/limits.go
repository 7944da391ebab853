package ucm

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Default limits. The per-file ones are far above what libibcm clients use
// (a handful of ids, a few queued events) but alone bound nothing: a client
// can open as many files as its fd limit allows, on every device, from as
// many processes as it likes. What bounds a user is the per-uid limits
// (ids, queued events, open files and waiting commands across all its
// files of every device); what bounds the daemon is the memory budget,
// shared by all users. At the defaults one user holds at most about
// 64 Ki ids x 640 B + 64 Ki events x ~1.4 KB + 4 Ki waiting commands x
// 10 KiB ~ 175 MB, a third of the budget, so no single user can exhaust
// it. One listener can still queue 65,535 REQs (each with
// its new connection's id), far above the 10,000 a busy server needs. The
// kernel had no such limits.
const (
	DefaultMaxIDs       = 1 << 16
	DefaultMaxEvents    = 1 << 16
	DefaultUserIDs      = 1 << 16
	DefaultUserEvents   = 1 << 16
	DefaultUserFiles    = 4096
	DefaultUserCopies   = 16
	DefaultCopies       = 1024
	DefaultUserWaits    = 4096
	DefaultMemoryBudget = 512 << 20

	// MaxCopies bounds Copies and UserCopies: each copy that hangs holds
	// a thread of the daemon's, and the Go runtime ends a program that
	// passes 10,000 threads (runtime/debug.SetMaxThreads), which leaves
	// room for the daemon's own.
	MaxCopies = 8192
)

// Limits bound what one open file, one user and the whole daemon may hold.
// Exceeding one fails the command with ENOMEM, the kernel's answer to a
// failed allocation (an open past UserFiles gets EMFILE, see Budget.take);
// a REQ that cannot be queued is answered with REJ (consumer defined), a
// SIDR_REQ with a rejecting SIDR_REP, and other events are dropped
// (design.md rule 7). What is already held or queued is never taken away.
type Limits struct {
	// MaxIDs is the most ids a file may have, counting new connections
	// not yet delivered. 0 means DefaultMaxIDs.
	MaxIDs int
	// MaxEvents is the most undelivered events a file may queue.
	// 0 means DefaultMaxEvents.
	MaxEvents int
	// UserIDs, UserEvents and UserFiles bound the same per opener's uid,
	// across its files of every Device sharing the Budget. 0 means the
	// default.
	UserIDs    int
	UserEvents int
	UserFiles  int
	// UserCopies bounds a uid's copies into and out of client memory in
	// progress at once, each a thread of the daemon for as long as it
	// takes (copySlots); more wait their turn. 0 means DefaultUserCopies;
	// above MaxCopies means MaxCopies.
	UserCopies int
	// Copies bounds the copies in progress of all users together, so
	// that the threads hung copies hold stay far below the Go runtime's
	// 10,000 whatever the number of uids: one person may have thousands
	// (a user namespace mapped onto its subordinate uids). 0 means
	// DefaultCopies; above MaxCopies means MaxCopies.
	Copies int
	// UserWaits bounds a uid's commands waiting at once: for an event
	// (GET_EVENT), for another command to let go of an id (DESTROY_ID)
	// or for a copy slot. Each is a goroutine of the daemon's with its
	// stack, where the kernel's driver let the caller's own thread wait;
	// one per file UserFiles allows. 0 means DefaultUserWaits.
	UserWaits int
	// MemoryBudget bounds, in bytes, what the ids, events, files and
	// waiting commands of all users may cost together (estimated; see
	// the *Cost constants).
	// 0 means DefaultMemoryBudget.
	MemoryBudget int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxIDs <= 0 {
		l.MaxIDs = DefaultMaxIDs
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultMaxEvents
	}
	if l.UserIDs <= 0 {
		l.UserIDs = DefaultUserIDs
	}
	if l.UserEvents <= 0 {
		l.UserEvents = DefaultUserEvents
	}
	if l.UserFiles <= 0 {
		l.UserFiles = DefaultUserFiles
	}
	if l.UserCopies <= 0 {
		l.UserCopies = DefaultUserCopies
	}
	if l.Copies <= 0 {
		l.Copies = DefaultCopies
	}
	l.UserCopies, l.Copies = min(l.UserCopies, MaxCopies), min(l.Copies, MaxCopies)
	if l.UserWaits <= 0 {
		l.UserWaits = DefaultUserWaits
	}
	if l.MemoryBudget <= 0 {
		l.MemoryBudget = DefaultMemoryBudget
	}
	return l
}

// LogValue is the limits in effect (the defaults filled in), each named
// by its `ucmd serve` flag, for the log line that says what a daemon
// serves with.
func (l Limits) LogValue() slog.Value {
	l = l.withDefaults()
	return slog.GroupValue(
		slog.Int(LimitMaxIDs.String(), l.MaxIDs), slog.Int(LimitMaxEvents.String(), l.MaxEvents),
		slog.Int(LimitUserIDs.String(), l.UserIDs), slog.Int(LimitUserEvents.String(), l.UserEvents),
		slog.Int(LimitUserFiles.String(), l.UserFiles), slog.Int(LimitUserWaits.String(), l.UserWaits),
		// Copies past these wait; they refuse nothing, so are no Limit.
		slog.Int("user-copies", l.UserCopies), slog.Int("copies", l.Copies),
		slog.Int64(LimitMemoryBudget.String(), l.MemoryBudget))
}

// Limit names one of Limits' bounds, as `ucmd serve`'s flag names it, so
// that status, the metrics and the log point the operator at the knob.
type Limit uint8

const (
	LimitMaxIDs Limit = iota
	LimitMaxEvents
	LimitUserIDs
	LimitUserEvents
	LimitUserFiles
	LimitUserWaits
	LimitMemoryBudget
	NumLimits
)

var limitNames = [NumLimits]string{
	LimitMaxIDs: "max-ids", LimitMaxEvents: "max-events", LimitUserIDs: "user-ids",
	LimitUserEvents: "user-events", LimitUserFiles: "user-files", LimitUserWaits: "user-waits",
	LimitMemoryBudget: "memory-budget",
}

func (l Limit) String() string {
	if l < NumLimits {
		return limitNames[l]
	}
	return fmt.Sprintf("Limit(%d)", uint8(l))
}

// What the budget charges, in bytes: estimates of the heap each costs,
// measured with the fake kernel (an idle id with its CM id and table
// entries: ~570 B; an event: its 256-byte struct and queue slot, plus its
// private data and info; a new connection's CM state, the REQ and its
// paths, on top of its id). A waiting command is its goroutine's stack
// and the request's state: ucmd's RSS grew by 9.2-12 KB per blocked
// GET_EVENT in the test VM, 500 to 2,000 of them.
const (
	fileCost    = 2048
	idCost      = 640
	eventCost   = 320
	newConnCost = 1024
	waitCost    = 10 << 10
)

// Budget counts what every user holds, against Limits' per-user limits and
// memory budget. Give the same Budget to every Device of one daemon, as
// the IDTable; the zero value is not usable, call NewBudget.
type Budget struct {
	lim Limits
	log *slog.Logger

	mu      sync.Mutex // a leaf: nothing is locked under it
	mem     int64
	users   map[uint32]*usage
	refused [NumLimits]uint64
	// warned spaces each limit's refusals in the log (spacedWarn): the
	// first a minute is a Warn naming the uid and the knob, the next only
	// Debug (a client past its limit retries in a loop); status counts
	// every one.
	warned [NumLimits]spacedWarn
	now    func() time.Time

	copies *copySlots // every user's copies: Limits.Copies
}

// usage is what one uid holds. It exists while the uid has a file open,
// or a copy still in progress that outlived its files (give).
type usage struct {
	files, ids, events, waits int
	timewait                  int   // of ids, those destroyed that the CM keeps for their timewait
	bytes                     int64 // its share of the memory budget
	copies                    *copySlots
}

// charge is one addition to or removal from a user's holdings.
type charge struct {
	files, ids, events, waits int
	timewait                  int // never refused: a count within ids
	bytes                     int64
}

// NewBudget returns an empty budget for l's per-user and daemon limits. It
// logs refusals to log (nil: slog.Default()).
func NewBudget(l Limits, log *slog.Logger) *Budget {
	l = l.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	return &Budget{lim: l, log: log, users: make(map[uint32]*usage), copies: &copySlots{max: uint64(l.Copies)}, now: time.Now}
}

// BudgetUsage is a snapshot of a Budget's memory, for status.
type BudgetUsage struct {
	Bytes, Limit int64
	Users        int // uids holding anything
}

// Usage returns the memory charged and the budget.
func (b *Budget) Usage() BudgetUsage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetUsage{Bytes: b.mem, Limit: b.lim.MemoryBudget, Users: len(b.users)}
}

// take charges c to uid if every limit allows it, else charges nothing.
//
// An open past UserFiles fails with EMFILE, not ENOMEM: it is a count of
// open files that ran out, not memory, and EMFILE is what Linux answers
// when a per-user count of such objects is reached (inotify_init's
// max_user_instances), so the client reports "too many open files" and the
// administrator looks at the right knob (--user-files). Running out of the
// memory budget is ENOMEM whatever the command, open included.
func (b *Budget) take(uid uint32, c charge) error {
	err := b.takeUnlogged(uid, c)
	b.logged(err)
	return err
}

// refusal is an error of a limit that refused something, with what its
// log line needs: takeUnlogged and fileRefusedUnlogged return it to
// callers that hold a lock (a file's), which log it through logged once
// they have let go, as a log writer may block.
type refusal struct {
	l     Limit
	uid   uint32
	bound int64
	warn  bool
	err   error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// logged logs err if it is a refusal, and returns it.
func (b *Budget) logged(err error) error {
	if r, ok := err.(*refusal); ok {
		b.logRefusal(r.warn, r.l, r.uid, r.bound, r.err)
	}
	return err
}

// takeUnlogged is take without the log line of a refusal (see refusal).
func (b *Budget) takeUnlogged(uid uint32, c charge) error {
	b.mu.Lock()
	u := b.users[uid]
	fresh := u == nil
	if fresh {
		u = &usage{copies: &copySlots{max: uint64(b.lim.UserCopies)}}
	}
	var (
		l     Limit
		bound int64
		err   error
	)
	switch {
	case c.files > 0 && u.files+c.files > b.lim.UserFiles:
		l, bound, err = LimitUserFiles, int64(b.lim.UserFiles), fmt.Errorf("ucm: uid %d has %d files open: %w", uid, u.files, unix.EMFILE)
	case c.ids > 0 && u.ids+c.ids > b.lim.UserIDs:
		l, bound, err = LimitUserIDs, int64(b.lim.UserIDs), fmt.Errorf("ucm: uid %d holds %d ids: %w", uid, u.ids, unix.ENOMEM)
	case c.events > 0 && u.events+c.events > b.lim.UserEvents:
		l, bound, err = LimitUserEvents, int64(b.lim.UserEvents), fmt.Errorf("ucm: uid %d has %d events queued: %w", uid, u.events, unix.ENOMEM)
	case c.waits > 0 && u.waits+c.waits > b.lim.UserWaits:
		l, bound, err = LimitUserWaits, int64(b.lim.UserWaits), fmt.Errorf("ucm: uid %d has %d commands waiting: %w", uid, u.waits, unix.ENOMEM)
	case c.bytes > 0 && b.mem+c.bytes > b.lim.MemoryBudget:
		l, bound, err = LimitMemoryBudget, b.lim.MemoryBudget, fmt.Errorf("ucm: memory budget of %d bytes reached: %w", b.lim.MemoryBudget, unix.ENOMEM)
	}
	if err != nil {
		warn := b.count(l)
		b.mu.Unlock()
		return &refusal{l: l, uid: uid, bound: bound, warn: warn, err: err}
	}
	u.files += c.files
	u.ids += c.ids
	u.events += c.events
	u.waits += c.waits
	u.timewait += c.timewait
	u.bytes += c.bytes
	b.mem += c.bytes
	if fresh {
		b.users[uid] = u
	}
	b.mu.Unlock()
	return nil
}

// count counts a refusal by l and says whether to log it at Warn: the
// first of l's in a minute. b.mu is held.
func (b *Budget) count(l Limit) (warn bool) {
	b.refused[l]++
	return b.warned[l].level(b.now()) == slog.LevelWarn
}

// logRefusal logs a refusal by l (whose value is bound) of what uid asked
// for, outside b.mu: a log writer may block.
func (b *Budget) logRefusal(warn bool, l Limit, uid uint32, bound int64, err error) {
	level := slog.LevelDebug
	if warn {
		level = slog.LevelWarn
	}
	b.log.Log(context.Background(), level, "ucm: a limit refused a user",
		"limit", "--"+l.String(), "max", bound, "uid", uid, "err", err,
		"note", "ucmd status counts every refusal; more of this limit's are logged at debug level for a minute")
}

// fileRefused counts a refusal by a per-file limit (MaxIDs, MaxEvents),
// whose check is the file's own, not the Budget's, and returns it as a
// refusal to log through logged.
func (b *Budget) fileRefused(l Limit, uid uint32, bound int, err error) error {
	b.mu.Lock()
	warn := b.count(l)
	b.mu.Unlock()
	return &refusal{l: l, uid: uid, bound: int64(bound), warn: warn, err: err}
}

// Refusals returns how many times each limit refused something, by name
// ("user-waits"); limits that never refused are absent.
func (b *Budget) Refusals() map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var m map[string]uint64
	for l, n := range b.refused {
		if n > 0 {
			if m == nil {
				m = make(map[string]uint64)
			}
			m[Limit(l).String()] = n
		}
	}
	return m
}

// give returns what take charged.
func (b *Budget) give(uid uint32, c charge) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.users[uid]
	if u == nil {
		return // a bug; never go negative
	}
	u.files -= c.files
	u.ids -= c.ids
	u.events -= c.events
	u.waits -= c.waits
	u.timewait -= c.timewait
	u.bytes -= c.bytes
	b.mem -= c.bytes
	if u.files == 0 && u.ids == 0 && u.events == 0 && u.waits == 0 {
		// Not while one of its copies hangs (a file released after the
		// server's shutdown grace): the uid's next file must count it.
		if n, waiting := u.copies.counts(); n == 0 && waiting == 0 {
			delete(b.users, uid)
		}
	}
}

// copySlots returns uid's copy slots; uid must have a file open.
func (b *Budget) copySlots(uid uint32) *copySlots {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.users[uid].copies
}

// UserUsage is what one uid holds.
type UserUsage struct {
	UID   uint32
	Files int // open files
	IDs   int // new connections not yet delivered included
	// Timewait is how many of IDs were destroyed but are kept by the CM
	// for their connection's timewait, charged until it ends.
	Timewait int
	Events   int   // queued
	Waits    int   // commands waiting (Limits.UserWaits)
	Bytes    int64 // what they cost, of the memory budget
	// Copies is the copies into or out of the uid's processes in
	// progress (at most Limits.UserCopies), not those waiting for one of
	// all users' slots: each takes microseconds, so a count that stays up
	// names a user whose copies hang, who may hold all users' slots
	// (Limits.Copies) without ever waiting for its own.
	Copies int
}

// User returns what uid holds.
func (b *Budget) User(uid uint32) UserUsage {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u := b.users[uid]; u != nil {
		return u.snapshot(uid)
	}
	return UserUsage{UID: uid}
}

// Users returns what every uid holding anything holds, by uid.
func (b *Budget) Users() []UserUsage {
	b.mu.Lock()
	out := make([]UserUsage, 0, len(b.users))
	for uid, u := range b.users {
		out = append(out, u.snapshot(uid))
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b UserUsage) int { return cmp.Compare(a.UID, b.UID) })
	return out
}

func (u *usage) snapshot(uid uint32) UserUsage {
	return UserUsage{UID: uid, Files: u.files, IDs: u.ids, Timewait: u.timewait, Events: u.events, Waits: u.waits, Bytes: u.bytes, Copies: u.copies.copying()}
}

// Copies returns all users' copies in progress and their bound
// (Limits.Copies).
func (b *Budget) Copies() (inProgress, max int) {
	n, _ := b.copies.counts()
	return n, int(b.copies.max)
}

// eventCharge is what a queued event costs (its new connection's id is
// charged separately, when it is created).
func eventCharge(e *event) charge {
	return charge{events: 1, bytes: eventCost + int64(len(e.data)+len(e.info))}
}

// idCharge is what an id costs; a new connection's carries its CM state.
func idCharge(newConn bool) charge {
	if newConn {
		return charge{ids: 1, bytes: idCost + newConnCost}
	}
	return charge{ids: 1, bytes: idCost}
}

// fileCharge is what an open file costs; waitCharge, a waiting command.
var (
	fileCharge = charge{files: 1, bytes: fileCost}
	waitCharge = charge{waits: 1, bytes: waitCost}
)

// plus adds c and d.
func (c charge) plus(d charge) charge {
	return charge{c.files + d.files, c.ids + d.ids, c.events + d.events, c.waits + d.waits, c.timewait + d.timewait, c.bytes + d.bytes}
}

// Probe takes the budget's lock and lets it go (Device.Probe).
func (b *Budget) Probe() { touch(&b.mu) }
