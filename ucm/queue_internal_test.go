package ucm

import (
	"context"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw/sim"
)

// Queueing an event and delivering it (enqueue, GET_EVENT's takeHead and
// finishDelivery) allocates nothing once the queue has room: no channel
// per event or per delivery (a wait makes its channel only when someone
// waits: GET_EVENT on an empty queue, a purge behind a copy), and the
// queue's array is kept when it empties. At fabric scale every CM event
// goes through here (internal/storm's profiles: two makechans per event).
func TestEventQueueNoAllocs(t *testing.T) {
	f, newCtx := newQueueFile(t)
	c := newCtx()
	e := &event{}
	cycle := func() {
		if err := f.enqueue(c, e); err != nil {
			t.Fatal(err)
		}
		got, err := f.takeHead(context.Background(), true)
		if err != nil || got != e {
			t.Fatalf("takeHead: %v, %v", got, err)
		}
		if !f.finishDelivery(e, true) {
			t.Fatal("not delivered")
		}
	}
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Errorf("an event queued and delivered: %v allocations, want 0", n)
	}
	if c.eventsReported != 101+1 {
		t.Errorf("events reported %d, want 102", c.eventsReported)
	}
}

// newQueueFile is an open file of a device on an unstarted CM, for the
// queue's own tests: its ids are made with addCtx and publish.
func newQueueFile(tb testing.TB) (*file, func() *ucmCtx) {
	tb.Helper()
	cm := newSimCM(tb, "sim0")
	d, err := New(Config{CM: cm, Memory: callermem.NewFake(),
		ThreadGroup: func(tid int) (int, error) { return tid, nil },
		ProcessName: func(int) (string, error) { return "t", nil }})
	if err != nil {
		tb.Fatal(err)
	}
	h, err := d.Open(context.Background(), cuse.Request{Caller: cuse.Caller{Pid: 7, Uid: 1, Gid: 1}, Flags: unix.O_RDWR}, nopWaker{})
	if err != nil {
		tb.Fatal(err)
	}
	f := h.(*file)
	tb.Cleanup(func() { f.Release(context.Background()) })
	return f, func() *ucmCtx {
		c := &ucmCtx{file: f, cmID: cm.CreateID(d.handler)}
		if err := f.addCtx(c); err != nil {
			tb.Fatal(err)
		}
		d.ids.publish(c)
		return c
	}
}

// newSimCM is a CM, not started, on a one-port IB device of its own
// simulated fabric, closed when tb ends.
func newSimCM(tb testing.TB, name string) *cmcore.CM {
	tb.Helper()
	sd, err := sim.New(sim.Config{Seed: 1}).AddIB(name, 1)
	if err != nil {
		tb.Fatal(err)
	}
	cm := cmcore.New(sd, cmcore.Options{})
	tb.Cleanup(func() { cm.Close() })
	return cm
}

// BenchmarkDestroyIDLongQueue destroys ids that have no event queued
// while another id of the file (a listener with 10,000 REQs waiting, as in
// internal/storm's listener storm) has a long queue: a DESTROY_ID's purge
// need not look at the other id's events.
func BenchmarkDestroyIDLongQueue(b *testing.B) {
	f, newCtx := newQueueFile(b)
	l := newCtx()
	for range 10_000 {
		if err := f.enqueue(l, &event{}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		f.teardown(context.Background(), newCtx())
	}
}

// Each id counts its queued events, so that DESTROY_ID's purge skips the
// file's queue when the id has none there (BenchmarkDestroyIDLongQueue):
// the counts follow enqueue, delivery and purge exactly, purging one id
// leaves the others' events in order, and status reports them per id.
func TestQueuedPerID(t *testing.T) {
	f, newCtx := newQueueFile(t)
	a, b, idle := newCtx(), newCtx(), newCtx()
	var bs []*event
	for i := range 6 {
		e := &event{}
		owner := a
		if i%2 == 1 {
			owner, bs = b, append(bs, e)
		}
		if err := f.enqueue(owner, e); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		n := map[*ucmCtx]int{}
		for _, e := range f.events {
			n[e.ctx]++
		}
		for _, c := range []*ucmCtx{a, b, idle} {
			if int(c.queued) != n[c] {
				t.Errorf("%s: id %d counts %d queued, the queue has %d", when, c.id, c.queued, n[c])
			}
		}
		for _, fi := range f.d.Files() {
			for _, id := range fi.IDs {
				for _, c := range []*ucmCtx{a, b, idle} {
					if id.ID == c.id && id.QueuedEvents != n[c] {
						t.Errorf("%s: status shows %d queued for id %d, want %d", when, id.QueuedEvents, c.id, n[c])
					}
				}
			}
		}
	}
	check("queued")
	e, err := f.takeHead(context.Background(), true)
	if err != nil || !f.finishDelivery(e, true) || e.ctx != a {
		t.Fatalf("delivering the head: %v", err)
	}
	check("one delivered")
	if _, orphans := f.purge(context.Background(), idle); len(orphans) != 0 || len(f.events) != 5 {
		t.Fatalf("purging an id with nothing queued: %d orphans, %d events left", len(orphans), len(f.events))
	}
	f.purge(context.Background(), a)
	check("a purged")
	if len(f.events) != len(bs) {
		t.Fatalf("%d events left, want b's %d", len(f.events), len(bs))
	}
	for i, e := range f.events {
		if e != bs[i] {
			t.Fatalf("event %d is not b's in order", i)
		}
	}
	if evs := f.d.budget.User(1).Events; evs != len(bs) {
		t.Errorf("budget charges %d events, want %d", evs, len(bs))
	}
}

// An id is one per connection end, a million at a 1,024-node storm's full
// mesh (internal/storm): it stays in the 64-byte size class.
func TestIDSize(t *testing.T) {
	if n := unsafe.Sizeof(ucmCtx{}); n > 64 {
		t.Errorf("ucmCtx is %d bytes, past the 64-byte size class", n)
	}
}

// A file's set of ids is a slice with each context's place in it: every
// context stays findable at its fidx through links and unlinks in any
// order, an unlink of a context not in the set changes nothing, and a
// file that held many ids gives the array back when they go.
func TestFileCtxSet(t *testing.T) {
	var f file
	check := func(want map[*ucmCtx]bool) {
		t.Helper()
		if len(f.ctxs) != len(want) {
			t.Fatalf("%d ids in the set, want %d", len(f.ctxs), len(want))
		}
		for i, c := range f.ctxs {
			if !want[c] || int(c.fidx) != i {
				t.Fatalf("set[%d]: fidx %d, in the model %v", i, c.fidx, want[c])
			}
		}
	}
	in := map[*ucmCtx]bool{}
	var all []*ucmCtx
	for range 10000 {
		c := &ucmCtx{}
		f.linkCtx(c)
		in[c] = true
		all = append(all, c)
	}
	check(in)
	peak := cap(f.ctxs)
	f.unlinkCtx(&ucmCtx{}) // never linked: fidx 0 names another
	check(in)
	for i, c := range all {
		if i%3 == 0 {
			continue
		}
		f.unlinkCtx(c)
		f.unlinkCtx(c) // twice: no effect
		delete(in, c)
		if i%997 == 0 {
			check(in)
		}
	}
	check(in)
	for i := 0; i < len(all); i += 3 {
		if i%2 == 0 {
			f.unlinkCtx(all[i])
			delete(in, all[i])
		}
	}
	check(in)
	if got := cap(f.ctxs); got > 4*len(f.ctxs)+64 || got >= peak {
		t.Errorf("%d ids left of 10,000 keep an array of %d (peak %d)", len(f.ctxs), got, peak)
	}
}
