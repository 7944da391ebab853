package cmcore

import (
	"iter"
	"math/bits"
	"math/rand/v2"
)

// index is a set of ids found by a key that each id's own fields give: its
// local comm ID, or its peer's comm ID or QPN with the peer's CA GUID. It
// stands in for a Go map from key to *ID for three reasons:
//
//   - A slot is the *ID and a tag byte, 9 bytes, where a map's slot holds
//     the key too (16 or 24 bytes, and a control byte). A connection end
//     is in all three of its CM's indexes, so a connection with both ends
//     in one daemon is six entries (BenchmarkLiveHeapPerConnection).
//   - It shrinks. A Go map keeps its largest size forever, so a daemon
//     that once held a million connections would keep their tables.
//   - No insertion moves more than maxBucket entries, as a map's does not
//     either: the CM holds cm.mu while it inserts, and rehashing a single
//     table of a million entries would stall it for tens of milliseconds.
//
// The layout is extendible hashing. The hash's top bits pick a bucket
// through a directory; a bucket is an open-addressing table with linear
// probing from the hash's low bits, and a tag of 8 other hash bits beside
// each slot, so that a probe reads the ids it passes only when their tags
// match. A bucket doubles up to maxBucket slots and then splits in two on
// the next hash bit, doubling the directory when the bucket already used
// all of its bits. A bucket that falls under 1/8 full halves, and two
// buckets split from one merge again when together they hold under a
// quarter of a full one, so a drained index is one small bucket again.
//
// The hash is keyed with random seeds: remote comm IDs and QPNs come off
// the wire, and a predictable hash would let a peer pile its entries into
// one probe sequence. It is two rounds of the multiply-and-fold that Go's
// runtime uses to hash map keys where AES is missing (wyhash's), inlined:
// with hash/maphash a lookup took 32 ns where a map's took 10
// (BenchmarkIndexGet against BenchmarkMapGet, before they read the id).
//
// A key must not change while its id is in the index (the id's comm IDs,
// remote QPN and CA GUID are set before it is inserted), and keys are
// unique: insert's caller checks with get first. Guarded by CM.mu.
type index struct {
	kind  keyKind
	seed  [3]uint64
	dir   []*bucket // 1<<depth entries
	depth uint
	n     int

	testHash func(idKey) uint64 // nil: the seeded hash
}

// idKey is what an index finds an id by.
type idKey struct {
	n    uint32 // a comm ID or QPN
	guid uint64 // the peer's CA GUID; 0 in the local comm ID index
}

// keyKind says which of an id's fields key an index.
type keyKind uint8

const (
	keyLocalID   keyKind = iota // (local comm ID, 0)
	keyRemoteID                 // (remote comm ID, remote CA GUID)
	keyRemoteQPN                // (remote QPN, remote CA GUID)
)

func (k keyKind) of(id *ID) idKey {
	switch k {
	case keyLocalID:
		return idKey{id.localID, 0}
	case keyRemoteID:
		return idKey{id.remoteID, id.remoteCAGUID}
	default:
		return idKey{id.remoteQPN, id.remoteCAGUID}
	}
}

// bucket is one open-addressing table. It is picked by the top depth bits
// of the hash, and so spans 1<<(index.depth-depth) consecutive directory
// entries.
type bucket struct {
	slots []*ID   // nil, or a power of two long, never more than 3/4 full
	tags  []uint8 // beside slots: tag(hash) of each id
	n     int
	depth uint
}

// A bucket starts at minBucket slots, doubles up to maxBucket and then
// splits. It halves when under 1/8 full, down to keepBucket: below that
// a shrink saves little, and a bucket whose ids come and go in waves (the
// remote indexes hold only the connections in progress) would reallocate
// with every wave.
const (
	minBucket  = 8
	keepBucket = 64
	maxBucket  = 1024
)

func newIndex(kind keyKind) index {
	return index{
		kind: kind,
		seed: [3]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64()},
		dir:  []*bucket{{}},
	}
}

func (x *index) hash(k idKey) uint64 {
	if x.testHash != nil {
		return x.testHash(k)
	}
	return mum(mum(uint64(k.n)^x.seed[0], k.guid^x.seed[1])^x.seed[2], 0x9E3779B97F4A7C15)
}

// mum folds the 128-bit product of a and b into 64 bits.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// tag is the byte kept beside an id's slot: hash bits that neither the
// directory (the top bits) nor a bucket's slot index (the low bits) use.
func tag(h uint64) uint8 { return uint8(h >> 32) }

func (x *index) len() int { return x.n }

// bucketOf is the bucket of hash h. At depth 0 the shift is by 64, which
// yields 0 for an unsigned value.
func (x *index) bucketOf(h uint64) *bucket { return x.dir[h>>(64-x.depth)] }

// get returns the id whose key is k, or nil.
func (x *index) get(k idKey) *ID {
	h := x.hash(k)
	b := x.bucketOf(h)
	if b.n == 0 {
		return nil
	}
	mask, t := uint64(len(b.slots)-1), tag(h)
	for i := h & mask; ; i = (i + 1) & mask {
		s := b.slots[i]
		if s == nil {
			return nil
		}
		if b.tags[i] == t && x.kind.of(s) == k {
			return s
		}
	}
}

// insert adds id, whose key must not be in the index yet.
func (x *index) insert(id *ID) {
	h := x.hash(x.kind.of(id))
	b := x.bucketOf(h)
	for (b.n+1)*4 > len(b.slots)*3 {
		if len(b.slots) >= maxBucket && x.split(b, h) {
			b = x.bucketOf(h)
			continue
		}
		x.resize(b, max(minBucket, 2*len(b.slots)))
	}
	b.place(id, h)
	b.n++
	x.n++
}

// remove takes id out of the index; it reports whether id was there.
func (x *index) remove(id *ID) bool {
	if id == nil {
		return false
	}
	h := x.hash(x.kind.of(id))
	b := x.bucketOf(h)
	if b.n == 0 {
		return false
	}
	mask := uint64(len(b.slots) - 1)
	i := h & mask
	for b.slots[i] != id {
		if b.slots[i] == nil {
			return false
		}
		i = (i + 1) & mask
	}
	// Backward-shift deletion: each entry after the hole whose probe
	// sequence passes the hole moves into it, so that no lookup stops at
	// the hole early and no tombstones pile up.
	for j := (i + 1) & mask; b.slots[j] != nil; j = (j + 1) & mask {
		home := x.hash(x.kind.of(b.slots[j])) & mask
		// The entry stays when its home lies cyclically in (i, j].
		stays := home > i && home <= j
		if j < i {
			stays = home > i || home <= j
		}
		if !stays {
			b.slots[i], b.tags[i] = b.slots[j], b.tags[j]
			i = j
		}
	}
	b.slots[i] = nil
	b.n--
	x.n--
	if !x.merge(b, h) && len(b.slots) > keepBucket && b.n*8 < len(b.slots) {
		x.resize(b, len(b.slots)/2)
	}
	return true
}

// all yields every id once, in no particular order. The index must not
// change while it runs.
func (x *index) all() iter.Seq[*ID] {
	return func(yield func(*ID) bool) {
		for _, b := range x.buckets() {
			for _, s := range b.slots {
				if s != nil && !yield(s) {
					return
				}
			}
		}
	}
}

// buckets yields each bucket once, with the first directory entry of its
// span.
func (x *index) buckets() iter.Seq2[int, *bucket] {
	return func(yield func(int, *bucket) bool) {
		for i := 0; i < len(x.dir); i += 1 << (x.depth - x.dir[i].depth) {
			if !yield(i, x.dir[i]) {
				return
			}
		}
	}
}

// span returns the directory entries of b, the bucket hash h falls in:
// span of them from start.
func (x *index) span(b *bucket, h uint64) (start, span uint64) {
	span = 1 << (x.depth - b.depth)
	return (h >> (64 - x.depth)) &^ (span - 1), span
}

// place puts id, whose hash is h, into the first free slot of its probe
// sequence; the caller has made room.
func (b *bucket) place(id *ID, h uint64) {
	mask := uint64(len(b.slots) - 1)
	i := h & mask
	for b.slots[i] != nil {
		i = (i + 1) & mask
	}
	b.slots[i], b.tags[i] = id, tag(h)
}

func newBucket(size int, depth uint) *bucket {
	b := &bucket{depth: depth}
	b.alloc(size)
	return b
}

// alloc gives b empty slots and tags of size entries.
func (b *bucket) alloc(size int) {
	b.slots, b.tags = make([]*ID, size), make([]uint8, size)
}

func (x *index) resize(b *bucket, size int) {
	old := b.slots
	b.alloc(size)
	for _, s := range old {
		if s != nil {
			b.place(s, x.hash(x.kind.of(s)))
		}
	}
}

// split replaces b, a full bucket that hash h falls in, by two buckets one
// hash bit deeper, each taking half of b's directory entries. It does
// nothing and returns false when all of b's entries agree on that bit:
// the split would leave one bucket as full as b, and repeating it would
// double the directory with every bit the entries share. A random seed
// makes that practically impossible (2^-767 for a full bucket), but a
// bucket that cannot split grows instead, and the index stays correct.
func (x *index) split(b *bucket, h uint64) bool {
	if b.depth == 64 {
		return false
	}
	bit := uint64(1) << (63 - b.depth)
	var ones int
	for _, s := range b.slots {
		if s != nil && x.hash(x.kind.of(s))&bit != 0 {
			ones++
		}
	}
	if ones == 0 || ones == b.n {
		return false
	}
	if b.depth == x.depth {
		dir := make([]*bucket, 2*len(x.dir))
		for i, d := range x.dir {
			dir[2*i], dir[2*i+1] = d, d
		}
		x.dir = dir
		x.depth++
	}
	lo, hi := newBucket(len(b.slots), b.depth+1), newBucket(len(b.slots), b.depth+1)
	for _, s := range b.slots {
		if s == nil {
			continue
		}
		sh := x.hash(x.kind.of(s))
		t := lo
		if sh&bit != 0 {
			t = hi
		}
		t.place(s, sh)
		t.n++
	}
	start, span := x.span(b, h)
	for i := range span {
		t := lo
		if i >= span/2 {
			t = hi
		}
		x.dir[start+i] = t
	}
	return true
}

// merge joins b, a bucket that hash h falls in, with its buddy (the bucket
// it split from, if that has not split further) when the two together hold
// under a quarter of a full bucket: three times fewer than a split leaves
// in them, so that ids coming and going around one count do not split and
// merge in turn. It halves the directory when no bucket needs all of its
// bits any more, so an index that a storm of ids grew returns to one
// bucket when they are gone.
func (x *index) merge(b *bucket, h uint64) bool {
	if b.depth == 0 {
		return false
	}
	start, span := x.span(b, h)
	buddy := x.dir[start^span]
	if buddy.depth != b.depth || b.n+buddy.n >= maxBucket/4 {
		return false
	}
	n := b.n + buddy.n
	size := keepBucket
	for n*2 > size {
		size *= 2
	}
	m := newBucket(size, b.depth-1)
	for _, old := range []*bucket{b, buddy} {
		for _, s := range old.slots {
			if s != nil {
				m.place(s, x.hash(x.kind.of(s)))
			}
		}
	}
	m.n = n
	first := start &^ (2*span - 1)
	for i := range 2 * span {
		x.dir[first+i] = m
	}
	if b.depth == x.depth {
		for _, d := range x.buckets() {
			if d.depth == x.depth {
				return true
			}
		}
		dir := make([]*bucket, len(x.dir)/2)
		for i := range dir {
			dir[i] = x.dir[2*i]
		}
		x.dir = dir
		x.depth--
	}
	return true
}
