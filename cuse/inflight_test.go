package cuse

import (
	"testing"
	"unsafe"
)

// The kernel's uniques step by two: requests in flight together land in
// different shards, and each shard has a cache line of its own.
func TestInflightShards(t *testing.T) {
	var tab inflightTable
	tab.init()
	seen := map[*inflightShard]bool{}
	for u := uint64(1000); u < 1000+2*inflightShards; u += 2 {
		sh := tab.shard(u)
		if seen[sh] {
			t.Fatalf("unique %d shares a shard with an earlier one of the last %d", u, inflightShards)
		}
		seen[sh] = true
		if tab.shard(u|1) != sh {
			t.Errorf("INTERRUPT unique %d and its request's %d in different shards", u|1, u)
		}
	}
	if n := unsafe.Sizeof(inflightShard{}); n != 64 {
		t.Errorf("shard of %d bytes, want 64 (one cache line)", n)
	}

	r := new(request)
	r.hdr.Unique = 42
	if !tab.add(r) {
		t.Fatal("add of unique 42 to an empty table refused")
	}
	sh := tab.shard(42)
	var got []*request
	tab.each(func(x *request) { got = append(got, x) })
	if len(got) != 1 || got[0] != r {
		t.Errorf("each visited %v, want the one request", got)
	}
	tab.remove(42)
	if len(sh.m) != 0 {
		t.Errorf("remove left %d requests", len(sh.m))
	}
}
