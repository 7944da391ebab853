// Package storm measures ucmd's CM at fabric scale on the simulated fabric
// (issue 17): connection storms of MPI-style wire-ups over N nodes, and a
// storm of REQs at one listener whose application accepts at a given rate.
// `ucmd bench storm` and `ucmd bench listener` run them (Run,
// RunListener); the Go entry points are
//
//	go test ./internal/storm                  # TestMesh32, TestMeshHostile, TestListenerStorm, TestListenerUCMBudget (make check)
//	STORM_NODES=256 go test -run XXX -bench Mesh -benchtime 1x ./internal/storm
//	STORM_MRA=off go test -run XXX -bench Listener -benchtime 1x ./internal/storm
//
// Measured results, with the commands that produced them: RESULTS.md.
//
// # What a node is
//
// Every node is a full ucmd device stack, as one ucmd daemon serves it: a
// hw/sim device with one IB port, a cmcore.CM on it (its own comm-ID,
// remote and listen tables, timers and receive goroutine), and a
// ucm.Device on the CM with its own id table and per-user Budget at ucm's
// default limits (65,536 ids and events per file and per user, 512 MiB).
// On top runs one application, a libibcm program: it opened the device
// once (Device.Open, O_NONBLOCK) and issues its writes on that file —
// CREATE_ID, LISTEN, SEND_REQ, GET_EVENT, SEND_REP, SEND_RTU, SEND_MRA,
// SEND_DREQ, SEND_DREP, DESTROY_ID — as the bytes libibcm writes, through
// ucm's cuse.Handle, with its buffers (responses, events, private data,
// path records) in a fake address space (callermem.Fake), exactly what the
// daemon serves from /dev/infiniband/ucm0 once the CUSE kernel has handed
// it a write. So every command goes through ucm's decode, id table and
// caller-memory copies, every event through ucm's handler, per-file event
// queue and Budget, and the node's state counts are read as `ucmd status`
// reads them (Device.Files).
//
// Why through ucm's API and not the fake CUSE kernel (cuse/cusetest): that
// kernel is a test helper (cusetest.Start needs a testing.TB), so `ucmd
// bench` could not use it at all; and it adds, per command, a socket-pair round trip, a request goroutine
// and its reader pool, work that is cuse's (measured by its own
// benchmarks, and the lead's performance issue), the same for every
// command whatever the fabric's size; 1,024 fake kernels would make it
// dominate what is measured, and their goroutines would make the runs
// non-deterministic. Calling the Handle is exactly what cuse's server does
// after decoding a request, so nothing of ucm or cmcore is skipped. The
// application uses no blocking call: its file is O_NONBLOCK, and the
// file's cuse.Waker (ucm calls Wake when it queues an event) marks it
// readable; the driving goroutine then runs it as an event loop would
// (poll, GET_EVENT while readable). On the real clock (Config.RealClock)
// each application runs on its own goroutine instead, woken the same way,
// concurrently with every CM's receive goroutine, as hosts of a real
// fabric would.
//
// For the listener storm the listening application either reads a REQ only
// when it accepts it (MRA off or the CM's: the REQs wait in ucm's event
// queue, charged to the user's Budget), or reads each at once to send its
// own MRA and keeps it in a backlog (delayed, immediate).
//
// # Time
//
// One clock.Fake drives the fabric's latencies and every CM's timers. A
// pump on the driving goroutine hands each MAD that reached a port to that
// CM's receive goroutine and waits for it to finish, runs the applications
// whose files became readable, and fires timers in deadline order on the
// same goroutine, so exactly one goroutine works at a time: a seed replays exactly (counts are reproducible), and processing
// takes no simulated time. The simulated time to full mesh is therefore the
// protocol's (latency, jitter, and the retransmission intervals that loss
// costs); the wall clock measures the CPU work (the applications', ucm's,
// cmcore's, the fabric's and the pump's hand-offs) on one core.
//
// # Checks
//
// A storm succeeds when every connection is ESTABLISHED on both its ends
// (in ucm's view of the CM) and, after every connection is disconnected
// (SEND_DREQ from the active side; SEND_DREP and DESTROY_ID on the passive
// side, DESTROY_ID on DREP), every id left destroyed (DESTROY_ID) and the
// clock run dry (timewait), every node holds only its listener: in the
// application, in ucm (its Budget: one file, one id, no event; the file's
// queue empty) and in the CM (no id but the listener, no queued event), and
// no timer is pending; then every application closes its file (RELEASE)
// and ucm's Budget and the CM must be empty. Run returns an error
// otherwise, with the Result. A listener storm's REQ timeouts are a
// result, not an error (without MRA they are expected); its leak check is
// the same.
package storm
