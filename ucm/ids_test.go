package ucm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestIDTableLowestFree(t *testing.T) {
	tab := NewIDTable()
	f := &file{}
	ctxs := make([]*ucmCtx, 5)
	for i := range ctxs {
		ctxs[i] = &ucmCtx{file: f}
		if err := tab.alloc(ctxs[i]); err != nil {
			t.Fatal(err)
		}
		if ctxs[i].id != uint32(i) {
			t.Fatalf("id %d, want %d", ctxs[i].id, i)
		}
	}
	tab.release(ctxs[3])
	tab.release(ctxs[1])
	tab.release(ctxs[1]) // twice: harmless
	for _, want := range []uint32{1, 3, 5} {
		c := &ucmCtx{file: f}
		if err := tab.alloc(c); err != nil {
			t.Fatal(err)
		}
		if c.id != want {
			t.Errorf("id %d, want %d", c.id, want)
		}
	}
	if n := tab.Len(); n != 6 {
		t.Errorf("Len %d, want 6", n)
	}
}

func TestIDTableShrinksFromTop(t *testing.T) {
	tab := NewIDTable()
	f := &file{}
	var cs []*ucmCtx
	for range 4 {
		c := &ucmCtx{file: f}
		if err := tab.alloc(c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for i := len(cs) - 1; i >= 0; i-- {
		tab.release(cs[i])
	}
	if len(tab.slots) != 0 || tab.free.Len() != 0 {
		t.Errorf("%d slots, %d free entries: want an empty table", len(tab.slots), tab.free.Len())
	}
}

// Rules 1 and 4: an id is found only once published, only by its own
// file (another file gets EINVAL), and not once removed.
func TestIDTableVisibility(t *testing.T) {
	tab := NewIDTable()
	mine, other := &file{}, &file{}
	c := &ucmCtx{file: mine}
	if err := tab.alloc(c); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.get(mine, c.id); errnoOf(err) != "ENOENT" {
		t.Errorf("hidden id: %v, want ENOENT", err)
	}
	tab.publish(c)
	if _, err := tab.get(other, c.id); errnoOf(err) != "EINVAL" {
		t.Errorf("other file: %v, want EINVAL", err)
	}
	x, err := tab.get(mine, c.id)
	if err != nil {
		t.Fatal(err)
	}
	tab.put(x)
	if _, err := tab.remove(mine, c.id); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.get(mine, c.id); errnoOf(err) != "ENOENT" {
		t.Errorf("removed id: %v, want ENOENT", err)
	}
	if d := &(ucmCtx{file: mine}); tab.alloc(d) == nil && d.id == c.id {
		t.Errorf("id %d reused while still being destroyed", d.id)
	}
}

func TestValidateListen(t *testing.T) {
	for _, tc := range []struct {
		sid, mask uint64
		ok        bool
	}{
		{0x1000, ^uint64(0), true},
		{0x0000000001000000, ^uint64(0), false},
		{0x0000000001ffffff, ^uint64(0), false},
		{0x0000000000010000, ^uint64(0), false},
		{0x000000000001ffff, ^uint64(0), false},
		{0x0000000001000000, 0, true},           // the raw mask is applied: 0 passes
		{0x0000000001000000, 0xff000000, false}, // sid&mask still in range
		{0x0000000002000000, ^uint64(0), true},
	} {
		if err := validateListen(tc.sid, tc.mask); (err == nil) != tc.ok {
			t.Errorf("validateListen(%#x, %#x) = %v, want ok=%v", tc.sid, tc.mask, err, tc.ok)
		}
	}
}

// The table against a naive model (a set of allocated ids; alloc takes the
// smallest number not in it) through random allocs and releases, with the
// invariants release relies on checked after every step: every heap entry
// below next is free and appears once, and next-1 is allocated.
func TestIDTableMatchesModel(t *testing.T) {
	tab := NewIDTable()
	f := &file{}
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint32]*ucmCtx{}
	lowestFree := func() uint32 {
		for id := uint32(0); ; id++ {
			if live[id] == nil {
				return id
			}
		}
	}
	for step := range 6000 {
		// Phases of growth and shrinking, so next moves both ways.
		grow := (step/500)%2 == 0
		if len(live) == 0 || rng.IntN(10) < 3 || (grow && rng.IntN(10) < 7) {
			want := lowestFree()
			c := &ucmCtx{file: f}
			if err := tab.alloc(c); err != nil {
				t.Fatal(err)
			}
			if c.id != want {
				t.Fatalf("step %d: alloc %d, want the lowest free %d", step, c.id, want)
			}
			live[c.id] = c
		} else {
			ids := make([]uint32, 0, len(live))
			for id := range live {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			id := ids[rng.IntN(len(ids))]
			if rng.IntN(4) == 0 {
				id = ids[len(ids)-1] // the top: next shrinks
			}
			tab.release(live[id])
			delete(live, id)
		}
		checkIDTable(t, tab, live)
	}
}

func checkIDTable(t *testing.T, tab *IDTable, live map[uint32]*ucmCtx) {
	t.Helper()
	if tab.n != len(live) || tab.Len() != len(live) {
		t.Fatalf("%d ids allocated, model has %d", tab.n, len(live))
	}
	next := uint32(len(tab.slots))
	if next > 0 && tab.slots[next-1] == nil {
		t.Fatalf("%d slots but id %d is free", next, next-1)
	}
	for id, c := range live {
		if tab.at(id) != c {
			t.Fatalf("id %d holds %p, model has %p", id, tab.at(id), c)
		}
	}
	seen := map[uint32]bool{}
	for _, id := range tab.free {
		if id >= next {
			continue // stale
		}
		if tab.slots[id] != nil || seen[id] {
			t.Fatalf("heap entry %d below %d: allocated %v, duplicate %v", id, next, tab.slots[id] != nil, seen[id])
		}
		seen[id] = true
	}
	for id := uint32(0); id < next; id++ {
		if tab.slots[id] == nil && !seen[id] {
			t.Fatalf("id %d below %d is free but not on the heap", id, next)
		}
	}
}

// Closing a file frees its ids in map order; freeing every id, in any
// order, empties the table, and numbering starts again at 0.
func TestIDTableReleaseAnyOrder(t *testing.T) {
	for _, order := range []string{"increasing", "decreasing", "random"} {
		t.Run(order, func(t *testing.T) {
			tab := NewIDTable()
			f := &file{}
			cs := allocIDs(t, tab, f, 1000)
			switch order {
			case "decreasing":
				slices.Reverse(cs)
			case "random":
				rand.New(rand.NewPCG(3, 4)).Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
			}
			for _, c := range cs {
				tab.release(c)
			}
			if len(tab.slots) != 0 || tab.Len() != 0 {
				t.Fatalf("%d slots, %d ids: want an empty table", len(tab.slots), tab.Len())
			}
			c := &ucmCtx{file: f}
			if err := tab.alloc(c); err != nil || c.id != 0 {
				t.Fatalf("alloc after emptying: id %d, %v", c.id, err)
			}
			if tab.free.Len() != 0 {
				t.Errorf("%d stale heap entries kept after an alloc", tab.free.Len())
			}
		})
	}
}

// Once most ids are gone (a client with many exited), the table gives the
// memory of their slots back, and keeps the ids still allocated.
func TestIDTableGivesMemoryBack(t *testing.T) {
	tab := NewIDTable()
	f := &file{}
	cs := allocIDs(t, tab, f, 20000)
	rest := cs[1:]
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	for _, c := range rest {
		tab.release(c)
	}
	if got := cap(tab.slots); got > 1024 {
		t.Errorf("%d slots kept for 1 id", got)
	}
	checkIDTable(t, tab, map[uint32]*ucmCtx{0: cs[0]})
}

// allocIDs allocates n ids of f in tab, in order.
func allocIDs(t *testing.T, tab *IDTable, f *file, n int) []*ucmCtx {
	t.Helper()
	cs := make([]*ucmCtx, n)
	for i := range cs {
		cs[i] = &ucmCtx{file: f}
		if err := tab.alloc(cs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return cs
}
