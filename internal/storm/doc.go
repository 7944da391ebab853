// Package storm measures ucmd's CM at fabric scale on the simulated fabric
// (issue 17): connection storms of MPI-style wire-ups over N nodes, and a
// storm of REQs at one listener whose application accepts at a given rate.
// `ucmd bench storm` and `ucmd bench listener` run them (Run,
// RunListener); the Go entry points are
//
//	go test ./internal/storm                  # TestMesh32, TestMeshHostile, TestListenerStorm (make check)
//	STORM_NODES=256 go test -run XXX -bench Mesh -benchtime 1x ./internal/storm
//	STORM_MRA=off go test -run XXX -bench Listener -benchtime 1x ./internal/storm
//
// Measured results, with the commands that produced them: RESULTS.md.
//
// # What a node is
//
// Every node is a hw/sim device with one IB port and a full cmcore.CM on it
// (its own comm-ID, remote and listen tables, timers and receive
// goroutine), with one listener; the harness plays ucm's part above the CM
// itself: its handler accepts a REQ as a libibcm application would after
// GET_EVENT (REP; RTU on REP; DREP on DREQ), and for the listener storm it
// queues new connections, as ucm's per-file event queue does, for an
// accept loop running at a fixed rate.
//
// Why not ucm.Device over the fake CUSE kernel: what grows with the fabric
// is the CM's state (ids, tables, timers, retransmissions) and the
// protocol's timing, and both are the same whoever calls the CM. ucm adds a
// constant per-command cost (decode, caller-memory copies, one event
// queue entry) that its own benchmarks measure, while 1,024 fake kernels
// (socket pairs, reader pools, fake address spaces) would make the harness,
// not the CM, what is measured, and its goroutines would make the runs
// non-deterministic. What ucm bounds (queued events per file and per user)
// is checked against ucm's defaults in the listener storm.
//
// # Time
//
// One clock.Fake drives the fabric's latencies and every CM's timers. A
// pump on the driving goroutine hands each MAD that reached a port to that
// CM's receive goroutine and waits for it to finish, and timers fire in
// deadline order on the same goroutine, so exactly one goroutine works at a
// time: a seed replays exactly (counts are reproducible), and processing
// takes no simulated time. The simulated time to full mesh is therefore the
// protocol's (latency, jitter, and the retransmission intervals that loss
// costs); the wall clock measures the CPU work (cmcore's, the fabric's and
// the pump's hand-offs) on one core.
//
// # Checks
//
// A storm succeeds when every connection is ESTABLISHED on both its ends
// and, after every connection is disconnected (DREQ from the active side,
// DREP and destroy on the passive side), every id destroyed and the clock
// run dry (timewait), every CM holds only its listener, no event is queued
// and no timer is pending. Run returns an error otherwise, with the Result.
// A listener storm's REQ timeouts are a result, not an error (without MRA
// they are expected); its leak check is the same.
package storm
