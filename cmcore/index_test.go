package cmcore

import (
	"math/rand/v2"
	"testing"
)

// checkIndex compares x with model (key → id) and checks the layout's
// invariants: every directory entry of a bucket lies in its span, the
// counts add up, no bucket is over 3/4 full, and every entry is reachable
// from its home slot without crossing a free slot.
func checkIndex(t *testing.T, x *index, model map[uint32]*ID) {
	t.Helper()
	if x.len() != len(model) {
		t.Fatalf("len %d, model %d", x.len(), len(model))
	}
	for k, id := range model {
		if got := x.get(idKey{k, 0}); got != id {
			t.Fatalf("get(%#x) = %p, want %p", k, got, id)
		}
	}
	seen := map[*ID]bool{}
	for id := range x.all() {
		if seen[id] {
			t.Fatalf("all yields id %#x twice", id.localID)
		}
		seen[id] = true
		if model[id.localID] != id {
			t.Fatalf("all yields id %#x, not in the model", id.localID)
		}
	}
	if len(seen) != len(model) {
		t.Fatalf("all yields %d ids, model has %d", len(seen), len(model))
	}
	n := 0
	for i, b := range x.buckets() {
		span := 1 << (x.depth - b.depth)
		if i%span != 0 {
			t.Fatalf("bucket at directory entry %d has a span of %d", i, span)
		}
		for j := i; j < i+span; j++ {
			if x.dir[j] != b {
				t.Fatalf("directory entry %d: not the bucket of its span at %d", j, i)
			}
		}
		if b.n*4 > len(b.slots)*3 && b.depth < 64 {
			t.Fatalf("bucket at %d: %d entries in %d slots", i, b.n, len(b.slots))
		}
		used := 0
		mask := uint64(len(b.slots) - 1)
		for slot, s := range b.slots {
			if s == nil {
				continue
			}
			used++
			h := x.hash(x.kind.of(s))
			if b.tags[slot] != tag(h) {
				t.Fatalf("id %#x at slot %d: tag %#x, want %#x", s.localID, slot, b.tags[slot], tag(h))
			}
			if int(h>>(64-x.depth)) < i || int(h>>(64-x.depth)) >= i+span {
				t.Fatalf("id %#x in the bucket at %d, its hash points elsewhere", s.localID, i)
			}
			for p := h & mask; p != uint64(slot); p = (p + 1) & mask {
				if b.slots[p] == nil {
					t.Fatalf("id %#x at slot %d behind a free slot %d of its probe", s.localID, slot, p)
				}
			}
		}
		if used != b.n {
			t.Fatalf("bucket at %d counts %d, holds %d", i, b.n, used)
		}
		n += used
	}
	if n != x.n {
		t.Fatalf("buckets hold %d, index counts %d", n, x.n)
	}
}

// slotsHeld is how many slots the index's buckets hold.
func slotsHeld(x *index) int {
	n := 0
	for _, b := range x.buckets() {
		n += len(b.slots)
	}
	return n
}

// exercise runs random inserts and removes of keys below keySpace against
// a model, checking after every step count steps.
func exercise(t *testing.T, x *index, r *rand.Rand, steps, keySpace, every int) map[uint32]*ID {
	model := map[uint32]*ID{}
	for step := range steps {
		k := uint32(r.IntN(keySpace))
		if cur := model[k]; cur != nil && r.IntN(3) > 0 {
			if !x.remove(cur) {
				t.Fatalf("remove(%#x) missed", k)
			}
			if x.remove(cur) {
				t.Fatalf("remove(%#x) twice found it", k)
			}
			delete(model, k)
		} else if cur == nil {
			if x.get(idKey{k, 0}) != nil {
				t.Fatalf("get(%#x) found a removed key", k)
			}
			id := &ID{localID: k}
			x.insert(id)
			model[k] = id
		}
		if step%every == 0 {
			checkIndex(t, x, model)
		}
	}
	checkIndex(t, x, model)
	return model
}

func TestIndexModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := newIndex(keyLocalID)
	exercise(t, &x, r, 200000, 20000, 5000)
	if x.depth == 0 {
		t.Fatalf("20,000 keys did not split a bucket (depth 0)")
	}
}

// TestIndexCollisions gives every key the same hash: one probe sequence,
// wrapping around the bucket, which cannot split and grows past maxBucket
// instead, leaving the directory alone.
func TestIndexCollisions(t *testing.T) {
	for _, h := range []uint64{0, ^uint64(0), 7} {
		x := newIndex(keyLocalID)
		x.testHash = func(idKey) uint64 { return h }
		model := exercise(t, &x, rand.New(rand.NewPCG(h, 3)), 6000, 3000, 500)
		if len(model) <= maxBucket*3/4 {
			t.Fatalf("hash %#x: only %d keys, not enough to fill a bucket", h, len(model))
		}
		if x.depth != 0 {
			t.Errorf("hash %#x: %d equal hashes made the directory %d deep", h, len(model), x.depth)
		}
	}
}

// TestIndexSharedPrefix: keys whose hashes agree on their top 20 bits
// (and differ below) cannot split a bucket on those bits; the bucket grows
// past maxBucket as one table and stays correct.
func TestIndexSharedPrefix(t *testing.T) {
	x := newIndex(keyLocalID)
	x.testHash = func(k idKey) uint64 { return 0xABCDE<<44 | uint64(k.n)*0x9E3779B97F4A7C15>>20 }
	exercise(t, &x, rand.New(rand.NewPCG(7, 8)), 100000, 20000, 10000)
	if x.depth != 0 {
		t.Errorf("depth %d with every hash in one prefix", x.depth)
	}
	if got := slotsHeld(&x); got <= maxBucket {
		t.Errorf("%d ids in %d slots: the bucket did not grow past maxBucket", x.len(), got)
	}
}

// TestIndexShrinks: a drained index gives its slots back, which a Go map
// does not.
func TestIndexShrinks(t *testing.T) {
	x := newIndex(keyLocalID)
	var ids []*ID
	for k := range uint32(100000) {
		id := &ID{localID: k}
		x.insert(id)
		ids = append(ids, id)
	}
	full := slotsHeld(&x)
	if full < 100000*4/3 || full > 100000*3 {
		t.Fatalf("100,000 ids in %d slots", full)
	}
	model := map[uint32]*ID{}
	for i, id := range ids {
		if i%100 == 0 {
			model[id.localID] = id
			continue
		}
		x.remove(id)
	}
	checkIndex(t, &x, model)
	// 1,000 left: the buckets merged back, each under 1/8 full or at
	// keepBucket slots.
	if got, most := slotsHeld(&x), 8*1000+keepBucket*len(x.dir); got > most || len(x.dir) > 8 {
		t.Errorf("1,000 of 100,000 ids left hold %d slots (at most %d) in a directory of %d (full: %d slots)", got, most, len(x.dir), full)
	}
	for _, id := range model {
		x.remove(id)
	}
	checkIndex(t, &x, nil)
	if got := slotsHeld(&x); x.depth != 0 || got > keepBucket {
		t.Errorf("empty index: depth %d, %d slots; want 0 and at most %d", x.depth, got, keepBucket)
	}
	// And it fills again.
	exercise(t, &x, rand.New(rand.NewPCG(5, 6)), 50000, 5000, 10000)
}

// TestIndexWaves fills and drains the index in waves, in random order,
// through splits and merges, checking it as it goes.
func TestIndexWaves(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	x := newIndex(keyLocalID)
	model := map[uint32]*ID{}
	step := 0
	check := func() {
		if step++; step%1500 == 0 {
			checkIndex(t, &x, model)
		}
	}
	for wave := range 6 {
		for range 5000 + wave*4000 {
			k := r.Uint32()
			if model[k] != nil {
				continue
			}
			id := &ID{localID: k}
			x.insert(id)
			model[k] = id
			check()
		}
		checkIndex(t, &x, model)
		keep := r.IntN(300)
		for k, id := range model { // random order
			if len(model) <= keep {
				break
			}
			x.remove(id)
			delete(model, k)
			check()
		}
		checkIndex(t, &x, model)
		if len(x.dir) > 2 {
			t.Errorf("wave %d: %d ids left in a directory of %d", wave, len(model), len(x.dir))
		}
	}
}

// TestIndexRemoveOthers: remove finds an id by identity, so an id whose
// key another id holds is not taken out in its place.
func TestIndexRemoveOthers(t *testing.T) {
	x := newIndex(keyLocalID)
	a := &ID{localID: 5}
	x.insert(a)
	if x.remove(&ID{localID: 5}) {
		t.Fatal("remove took out another id with the same key")
	}
	if x.remove(nil) {
		t.Fatal("remove(nil) reported an id")
	}
	if x.get(idKey{5, 0}) != a {
		t.Fatal("get lost the id")
	}
}

// BenchmarkIndexGet and BenchmarkMapGet look up 65,536 ids, each
// reading the id it finds, as the CM does (acquire checks its state): the
// index reads it to compare keys, the map only after.
func BenchmarkIndexGet(b *testing.B) {
	x := newIndex(keyLocalID)
	const n = 1 << 16
	for k := range uint32(n) {
		x.insert(&ID{localID: k * 2654435761})
	}
	var k uint32
	for b.Loop() {
		if id := x.get(idKey{k * 2654435761, 0}); id == nil || id.destroyed {
			b.Fatal("missing")
		}
		k = (k + 1) % n
	}
}

func BenchmarkMapGet(b *testing.B) {
	m := map[uint32]*ID{}
	const n = 1 << 16
	for k := range uint32(n) {
		m[k*2654435761] = &ID{localID: k * 2654435761}
	}
	var k uint32
	for b.Loop() {
		if id := m[k*2654435761]; id == nil || id.destroyed {
			b.Fatal("missing")
		}
		k = (k + 1) % n
	}
}
