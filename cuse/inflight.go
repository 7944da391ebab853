package cuse

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// inflightTable holds the requests read and not yet answered, by unique,
// for INTERRUPT (which names its request by unique) and for shutdown.
// Every request is registered by the reader that read it and removed by
// its reply, so the table is written twice a request by whichever readers
// run. With one lock for the whole table (and the file lookups under it
// too), readers on more threads than CPUs waited for it, since a reader
// preempted while holding it holds it until it runs again: in the test VM
// at four client threads, 0.22-0.38 s blocked in a run of about 0.6 s. So
// the table is split into shards by unique, each with its own lock, and
// two requests in flight rarely share one (docs/perf.md, "Locks at four
// client threads").
type inflightTable struct {
	shards    [inflightShards]inflightShard
	cancelled atomic.Bool // cancelAll has begun: every request is cancelled
}

// inflightShards is a power of two above the requests a server usually
// serves at once; requests that wait (a blocked GET_EVENT) take their
// shard's lock only to register and to leave.
const inflightShards = 16

type inflightShard struct {
	mu sync.Mutex
	m  map[uint64]*request
	// One shard a cache line: readers on other CPUs write the others.
	_ [64 - unsafe.Sizeof(sync.Mutex{}) - unsafe.Sizeof(map[uint64]*request(nil))]byte
}

func (t *inflightTable) init() {
	for i := range t.shards {
		t.shards[i].m = make(map[uint64]*request)
	}
}

// shard is the shard of unique. The kernel numbers requests in steps of
// two (FUSE_REQ_ID_STEP; the low bit marks an INTERRUPT's own unique),
// so consecutive requests fall in consecutive shards.
func (t *inflightTable) shard(unique uint64) *inflightShard {
	return &t.shards[(unique>>1)%inflightShards]
}

// add registers r under its unique, unless a request in flight already
// has that unique. A request added once cancelAll has begun is cancelled
// from the start: read during shutdown, it is served, but as cancelled.
func (t *inflightTable) add(r *request) bool {
	sh := t.shard(r.hdr.Unique)
	sh.mu.Lock()
	if _, dup := sh.m[r.hdr.Unique]; dup {
		sh.mu.Unlock()
		return false
	}
	if t.cancelled.Load() {
		r.cause = errShutdown // r is not yet shared
	}
	sh.m[r.hdr.Unique] = r
	sh.mu.Unlock()
	return true
}

// cancel cancels the request in flight with unique, and reports whether
// there was one. It cancels under the shard's lock: once out of the table
// a request may be reset for another one.
func (t *inflightTable) cancel(unique uint64, cause error) bool {
	sh := t.shard(unique)
	sh.mu.Lock()
	r := sh.m[unique]
	if r != nil {
		r.cancel(cause)
	}
	sh.mu.Unlock()
	return r != nil
}

// cancelAll cancels every request in flight, and every one added from now
// on, for shutdown. The flag is set before any shard is visited, and add
// reads it under the shard's lock: a request added to a shard already
// visited sees the flag.
func (t *inflightTable) cancelAll() {
	t.cancelled.Store(true)
	t.each(func(r *request) { r.cancel(errShutdown) })
}

// remove takes unique out of the table.
func (t *inflightTable) remove(unique uint64) {
	sh := t.shard(unique)
	sh.mu.Lock()
	delete(sh.m, unique)
	sh.mu.Unlock()
}

// each calls f for every request in the table, under its shard's lock.
func (t *inflightTable) each(f func(*request)) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, r := range sh.m {
			f(r)
		}
		sh.mu.Unlock()
	}
}
