package cmcore

import (
	"testing"
	"unsafe"
)

// TestIDSizeClass keeps an ID in the 256-byte size class of Go's
// allocator: one per idle id and two per connection, it is most of the
// daemon's memory per id (ucm's BenchmarkLiveHeapPerID). Past 256 bytes
// the allocator rounds it up to 288 or more.
func TestIDSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(ID{}); n > 256 {
		t.Fatalf("cmcore.ID is %d bytes, over the 256-byte size class: put rarely used fields behind a pointer (as alt and saved)", n)
	}
}
