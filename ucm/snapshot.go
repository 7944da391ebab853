package ucm

import (
	"cmp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw"
)

// FileInfo describes one open file, for `ucmd status`.
type FileInfo struct {
	PID          int    // the process that opened it (its thread group id)
	UID          uint32 // its opener's uid, whose limits it counts against
	Comm         string // that process's name at open; "" if unknown
	Opened       time.Time
	QueuedEvents int
	// Waiting is the file's commands waiting: GET_EVENTs for an event,
	// DESTROY_IDs for the id's other commands, and CopyWaiting of them
	// for one of the user's copy slots, which for long means that the
	// user's copies hang (copySlots).
	Waiting, CopyWaiting int
	IDs                  []IDInfo
}

// IDInfo describes one id of a file.
type IDInfo struct {
	ID           uint32
	State        cmcore.State
	ServiceID    uint64
	LocalCommID  uint32
	RemoteCommID uint32
	Port         int // 0: no port yet
	LocalQPN     uint32
	RemoteQPN    uint32
	RemoteGID    hw.GID // zero: unknown or no GRH
	QueuedEvents int    // undelivered events counted on this id
}

// Files returns the device's open files and their ids (new connections not
// yet delivered are not shown: the client cannot see them either). It takes
// each file's lock briefly and never blocks behind a command.
func (d *Device) Files() []FileInfo {
	d.filesMu.Lock()
	files := make([]*file, 0, len(d.files))
	for f := range d.files {
		files = append(files, f)
	}
	d.filesMu.Unlock()

	out := make([]FileInfo, 0, len(files))
	for _, f := range files {
		fi := FileInfo{PID: f.pid, UID: f.uid, Comm: f.comm, Opened: f.opened,
			Waiting: int(f.waits.Load()), CopyWaiting: int(f.copyWaits.Load())}
		// What each id needs from under the two locks, side by side in
		// slices: with tens of thousands of ids, maps keyed by id cost
		// the daemon several times the result.
		f.mu.Lock()
		ctxs := slices.Clone(f.ctxs)
		queued := make([]int, len(ctxs))
		for i, c := range ctxs {
			queued[i] = int(c.queued)
		}
		fi.QueuedEvents = len(f.events)
		f.mu.Unlock()

		// The live ids move to the front, their queued counts with them.
		d.ids.mu.Lock()
		ids := make([]uint32, 0, len(ctxs))
		for i, c := range ctxs {
			if d.ids.at(c.id) == c && c.slot == slotLive {
				ctxs[len(ids)], queued[len(ids)] = c, queued[i]
				ids = append(ids, c.id)
			}
		}
		d.ids.mu.Unlock()

		fi.IDs = make([]IDInfo, 0, len(ids))
		for i, c := range ctxs[:len(ids)] {
			st, _ := c.cmID.State()
			a := c.cmID.Attr()
			fi.IDs = append(fi.IDs, IDInfo{
				ID: ids[i], State: st, ServiceID: a.ServiceID,
				LocalCommID: a.LocalCommID, RemoteCommID: a.RemoteCommID,
				Port: a.Port, LocalQPN: a.LocalQPN, RemoteQPN: a.RemoteQPN, RemoteGID: a.RemoteGID,
				QueuedEvents: queued[i],
			})
		}
		slices.SortFunc(fi.IDs, func(a, b IDInfo) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Opened.Before(out[j].Opened) })
	return out
}

// Probe takes each lock of d that a command takes (the files', each
// file's, the id table's, the failure record's) one at a time, and lets it
// go at once. It returns unless one of them is held for good, by a
// deadlock: the daemon's health check for systemd's watchdog. Unlike
// Files, it allocates nothing per id.
func (d *Device) Probe() {
	d.filesMu.Lock()
	files := make([]*file, 0, len(d.files))
	for f := range d.files {
		files = append(files, f)
	}
	d.filesMu.Unlock()
	for _, f := range files {
		touch(&f.mu)
	}
	touch(&d.ids.mu)
	touch(&d.fails.mu)
}

// touch waits for mu to be free, and leaves it so.
func touch(mu *sync.Mutex) {
	mu.Lock()
	//lint:ignore SA2001 waiting for the lock is the point
	mu.Unlock()
}
