package ucm

import (
	"context"
	"testing"

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
	fab := sim.New(sim.Config{Seed: 1})
	sd, err := fab.AddIB("sim0", 1)
	if err != nil {
		t.Fatal(err)
	}
	cm := cmcore.New(sd, cmcore.Options{})
	defer cm.Close()
	d, err := New(Config{CM: cm, Memory: callermem.NewFake(),
		ThreadGroup: func(tid int) (int, error) { return tid, nil },
		ProcessName: func(int) (string, error) { return "t", nil }})
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Open(context.Background(), cuse.Request{Caller: cuse.Caller{Pid: 7, Uid: 1, Gid: 1}, Flags: unix.O_RDWR}, nopWaker{})
	if err != nil {
		t.Fatal(err)
	}
	f := h.(*file)
	defer f.Release(context.Background())
	c := &ucmCtx{file: f, cmID: cm.CreateID(d.handler)}
	if err := f.addCtx(c); err != nil {
		t.Fatal(err)
	}
	d.ids.publish(c)
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
