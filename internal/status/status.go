// Package status is ucmd's control socket: the daemon answers a snapshot of
// its devices, open files, ids and MAD counters; `ucmd status` prints it.
//
// The protocol is one JSON document per connection: the client connects and
// reads until EOF. The socket is created 0600 in the runtime directory, so
// only root reads another user's connections, unless the daemon names a
// group (WithGroup: mode 0660 and that group).
//
// In the JSON, 64-bit values (service ids, GUIDs) are hex strings
// ("0x0000000000001234"): a JSON number loses their low bits in jq and
// JavaScript.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/internal/pace"
)

// SocketName is the control socket's name in the runtime directory.
const SocketName = "ucmd.sock"

// Snapshot is the whole state at one moment.
type Snapshot struct {
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	Fabric  string    `json:"fabric"` // "umad" or "sim"
	Devices []Device  `json:"devices"`
	// Unserved lists the devices found that could not be served (the
	// kernel's ib_cm owns their CM class, say) and are tried again.
	Unserved []Unserved `json:"unserved,omitempty"`
	// Retired counts the devices the daemon stopped serving since it
	// started, by reason (RetireReasons); absent when none was.
	Retired map[string]uint64 `json:"retired,omitempty"`
	Limits  Limits            `json:"limits"`
}

// Why a served device was retired (docs/hotplug.md): the keys of
// Snapshot.Retired.
const (
	RetiredGone            = "gone"             // no longer listed
	RetiredPortsStopped    = "ports-stopped"    // every port's umad reads failed
	RetiredRegisteredAgain = "registered-again" // listed with another node GUID or umad files
	RetiredChannelFailed   = "channel-failed"   // the kernel ended its CUSE channel (an abort); served again at once
)

// RetireReasons lists every reason, in a fixed order.
var RetireReasons = []string{RetiredGone, RetiredPortsStopped, RetiredRegisteredAgain, RetiredChannelFailed}

// Limits is what the users hold against `ucmd serve`'s limits, across every
// device: the memory budget, each uid holding anything, and how many times
// each limit refused something (a command's ENOMEM or EMFILE, a new
// connection rejected, an event dropped).
type Limits struct {
	MemoryCharged int64 `json:"memory_charged"` // bytes, estimated
	MemoryBudget  int64 `json:"memory_budget"`  // --memory-budget
	// Copies into or out of client memory in progress, all users', and
	// their bound (--copies): each takes microseconds; copies that stay
	// in progress hang (docs/cuse.md §3), Users says whose.
	Copies    int    `json:"copies_in_progress"`
	CopiesMax int    `json:"copies_max"`
	Users     []User `json:"users"`
	// Refused counts refusals by the limit's flag name ("user-waits");
	// absent when none refused anything.
	Refused map[string]uint64 `json:"refused,omitempty"`
}

// User is what one uid holds over all its files of every device.
type User struct {
	UID   uint32 `json:"uid"`
	Files int    `json:"files"`
	IDs   int    `json:"ids"` // new connections not yet delivered included
	// Of IDs, those destroyed but kept for their connection's timewait:
	// charged until it ends (docs/ib-cm.md §5.1).
	Timewait int   `json:"timewait_ids"`
	Events   int   `json:"queued_events"`
	Waiting  int   `json:"waiting_commands"`
	Copies   int   `json:"copies_in_progress"` // at most --user-copies
	Memory   int64 `json:"memory_charged"`     // bytes of the budget, estimated
}

// Unserved is an RDMA device ucmd found but could not serve.
type Unserved struct {
	Name    string    `json:"name"`
	Reason  string    `json:"reason"`   // the last attempt's error
	Since   time.Time `json:"since"`    // the first failed attempt
	NextTry time.Time `json:"next_try"` // not before
}

// Device is one RDMA device served as /dev/infiniband/ucmN.
type Device struct {
	Name     string     `json:"name"`
	Node     string     `json:"node"` // e.g. /dev/infiniband/ucm0
	NodeGUID string     `json:"node_guid"`
	Ports    []Port     `json:"ports"`
	Files    []File     `json:"files"`
	Counters MADCounter `json:"counters"`
	// Errors counts the commands that failed on this device, by errno
	// name ("EINVAL"); absent when none failed.
	Errors map[string]uint64 `json:"errors,omitempty"`
}

// Port is one port of a device.
type Port struct {
	Num       int    `json:"num"`
	LinkLayer string `json:"link_layer"`
	State     string `json:"state"`
	LID       uint16 `json:"lid,omitempty"`
	GID0      string `json:"gid0,omitempty"`
	// ReceiveError is why the CM stopped receiving MADs on the port; State
	// is then STOPPED (the text shows only that; the log and JSON say why).
	// A removed device's umad file fails its reads so.
	ReceiveError string `json:"receive_error,omitempty"`
	// Neighbours counts, on a RoCE port, the first sends to peers not yet
	// reached whose MAC ucmd had the kernel resolve first (docs/umad.md).
	Neighbours *Neighbours `json:"neighbours,omitempty"`
}

// Neighbours: Resolved found the peer's MAC, Failed did not (the send
// failed with ETIMEDOUT), Unanswered could not be asked through rtnetlink
// and resolved in umad's write, on a lane shared with every such send;
// Error is why, the last time.
type Neighbours struct {
	Resolved   uint64 `json:"resolved"`
	Failed     uint64 `json:"failed"`
	Unanswered uint64 `json:"unanswered"`
	Error      string `json:"error,omitempty"`
}

// File is one open file of a ucm device.
type File struct {
	PID    int    `json:"pid"`            // the opener's process (thread group), not its thread
	UID    uint32 `json:"uid"`            // the opener's, whose limits the file counts against
	Comm   string `json:"comm,omitempty"` // that process's name at open
	Events int    `json:"queued_events"`
	// Commands waiting (GET_EVENT for an event, DESTROY_ID for the id's
	// other commands), and of them those waiting for a copy slot: the
	// user's copies into its memory hang (docs/cuse.md §3).
	Waiting     int   `json:"waiting_commands"`
	CopyWaiting int   `json:"waiting_for_copy"`
	IDs         []ID  `json:"ids"`
	Opened      int64 `json:"opened_unix,omitempty"`
}

// ID is one ucm id.
type ID struct {
	ID           uint32 `json:"id"`
	State        string `json:"state"`
	ServiceID    Hex64  `json:"service_id"`
	Port         int    `json:"port,omitempty"` // 0: no port yet
	LocalQPN     uint32 `json:"local_qpn"`
	RemoteQPN    uint32 `json:"remote_qpn"`
	LocalCommID  uint32 `json:"local_comm_id"`
	RemoteCommID uint32 `json:"remote_comm_id"`
	RemoteGID    string `json:"remote_gid,omitempty"`
	Events       int    `json:"queued_events"`
}

// Hex64 is a 64-bit value that JSON carries as a hex string, "0x" and 16
// digits. It decodes from such a string or from a JSON number.
type Hex64 uint64

func (h Hex64) String() string { return fmt.Sprintf("0x%016x", uint64(h)) }

// MarshalJSON implements json.Marshaler.
func (h Hex64) MarshalJSON() ([]byte, error) { return []byte(`"` + h.String() + `"`), nil }

// UnmarshalJSON implements json.Unmarshaler.
func (h *Hex64) UnmarshalJSON(b []byte) error {
	str := string(b)
	if uq, err := strconv.Unquote(str); err == nil {
		str = uq
	}
	v, err := strconv.ParseUint(str, 0, 64)
	if err != nil {
		return fmt.Errorf("status: 64-bit value %s: %w", b, err)
	}
	*h = Hex64(v)
	return nil
}

// MADCounter counts a device's CM MADs.
type MADCounter struct {
	Sent          uint64 `json:"sent"`
	Received      uint64 `json:"received"`
	Retransmitted uint64 `json:"retransmitted"`
	TimedOut      uint64 `json:"timed_out"`
	// Dropped counts received MADs that were dropped (not CM messages
	// ucmd can decode); SendFailed counts sends the fabric refused, each
	// lost like a MAD on the wire.
	Dropped    uint64 `json:"dropped"`
	SendFailed uint64 `json:"send_failed"`
}

// Provider produces snapshots; the daemon implements it.
type Provider interface {
	Snapshot() Snapshot
}

// ProviderFunc adapts a function to Provider.
type ProviderFunc func() Snapshot

func (f ProviderFunc) Snapshot() Snapshot { return f() }

// Server answers snapshots on a unix socket.
type Server struct {
	ln   net.Listener
	p    Provider
	log  *slog.Logger
	wg   sync.WaitGroup
	once sync.Once
	// snap lets one snapshot (and its JSON) be made at a time: each walks
	// every id of every open file, megabytes for a daemon of many ids.
	snap sync.Mutex
	pace pace.Spacer // under snap
}

// maxSnapshotWait bounds how long an answer waits for its turn.
const maxSnapshotWait = time.Second

// MaxClients bounds the status socket's connections served at once; more
// wait in the kernel's backlog. Each holds its answer until it is read or
// its write times out.
const MaxClients = 16

// Option changes how Listen makes the socket.
type Option func(*options)

type options struct {
	gid int // -1: root only
}

// WithGroup makes the socket readable by the group gid (mode 0660 and that
// group) besides root; without it the socket is 0600. gid < 0 is no group.
func WithGroup(gid int) Option { return func(o *options) { o.gid = gid } }

// Listen creates the control socket in dir, replacing a stale one.
func Listen(dir string, p Provider, log *slog.Logger, opts ...Option) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := ListenSocket(dir, SocketName, opts...)
	if err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	s := &Server{ln: ln, p: p, log: log}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// ListenSocket creates the unix socket name in dir with the control
// socket's access rule (0600, root only; WithGroup: 0660 and that group),
// replacing a stale one and refusing if a daemon answers on it. The trace
// socket (internal/trace) is made by it too.
func ListenSocket(dir, name string, opts ...Option) (net.Listener, error) {
	o := options{gid: -1}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s: another ucmd is running", path)
	}
	// Bound in a directory of its own, which only root can enter, given
	// its group and mode there, then renamed into place: bound where it
	// stays, the socket took the process's umask until the chmod after
	// it, and a client that connected in between was served whatever
	// the mode was to be.
	tmp, err := os.MkdirTemp(dir, ".bind-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, name)
	ln, err := net.Listen("unix", bound)
	if err != nil {
		return nil, err
	}
	afterBind(path)
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // it is unlinked at path, below
	mode := os.FileMode(0o600)
	if o.gid >= 0 {
		mode = 0o660
		if err := os.Chown(bound, -1, o.gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s: group %d: %w", path, o.gid, err)
		}
	}
	if err := os.Chmod(bound, mode); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Rename(bound, path); err != nil { // replaces a stale one
		ln.Close()
		return nil, err
	}
	return &socketListener{UnixListener: ul, path: path}, nil
}

// afterBind runs once the socket is bound, before its mode is set (tests
// try to connect then).
var afterBind = func(path string) {}

// socketListener unlinks its socket at the path it was renamed to when it
// closes, as a UnixListener does at the path it was bound to.
type socketListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}

func (s *Server) serve() {
	defer s.wg.Done()
	AcceptLoop(s.ln, MaxClients, &s.wg, s.log, "status socket", func(c net.Conn) {
		defer c.Close()
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		b, err := s.answer()
		if err == nil {
			_, err = c.Write(b)
		}
		if err != nil {
			s.log.Debug("status socket write", "err", err)
		}
	})
}

// answer is a snapshot taken after the request came, as JSON. The
// snapshots are spaced (package pace): a member of --status-group who
// loops `ucmd status` (or many at once) gets fresh answers, more slowly,
// and costs the daemon about a tenth of a CPU in walks of the ids under
// the files' locks (7 ms and 10 MB at 60,000 ids).
func (s *Server) answer() ([]byte, error) {
	s.snap.Lock()
	defer s.snap.Unlock()
	var b []byte
	var err error
	s.pace.Run(maxSnapshotWait, func() { b, err = json.Marshal(s.p.Snapshot()) })
	return append(b, '\n'), err
}

// AcceptLoop serves each connection ln accepts with handle on a goroutine
// of its own, counted in wg, until ln is closed; at most limit at once,
// the others left in the kernel's backlog until one ends. Any other
// accept error, such as EMFILE while the daemon is out of descriptors,
// is logged as what's and does not end the loop: it tries again after a
// pause that doubles from 5 ms up to a second, as net/http's Server does.
func AcceptLoop(ln net.Listener, limit int, wg *sync.WaitGroup, log *slog.Logger, what string, handle func(net.Conn)) {
	slots := make(chan struct{}, limit)
	var pause time.Duration
	for {
		slots <- struct{}{}
		c, err := ln.Accept()
		if err != nil {
			<-slots
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, acceptPause), time.Second)
			log.Warn(what+" accept", "err", err, "retry_in", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			handle(c)
		}()
	}
}

// acceptPause is AcceptLoop's first pause after an accept error.
const acceptPause = 5 * time.Millisecond

// Close removes the socket and waits for answers in progress.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		err = s.ln.Close() // unlinks the socket file
		s.wg.Wait()
	})
	return err
}

// Fetch reads a snapshot from the daemon whose runtime directory is dir.
func Fetch(ctx context.Context, dir string) (Snapshot, error) {
	var snap Snapshot
	path := filepath.Join(dir, SocketName)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		hint := "is ucmd serve running?"
		if errors.Is(err, fs.ErrPermission) {
			hint = "the socket is root's, and its --status-group's"
		}
		return snap, fmt.Errorf("connect to ucmd at %s (%s): %w", path, hint, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if err := json.NewDecoder(c).Decode(&snap); err != nil {
		return snap, fmt.Errorf("read status from %s: %w", path, err)
	}
	return snap, nil
}

// Filter selects what `ucmd status` shows; a zero field selects all.
type Filter struct {
	Dev   string // device name (mlx5_0) or node (ucm0, /dev/infiniband/ucm0)
	PID   int    // the opener's process
	State string // id state, case-insensitive (ESTABLISHED)
	// UID, with ByUID, selects the files of the opener's uid and that
	// uid's line in the limits' users (uid 0 is root, not "all").
	UID   uint32
	ByUID bool
}

// ParseFilter reads a filter the way `rdma resource show` does: keyword
// and value pairs, "dev ucm0 pid 4242 state established uid 1000".
func ParseFilter(args []string) (Filter, error) {
	var f Filter
	if len(args)%2 != 0 {
		return f, fmt.Errorf("filter %q needs a value (dev NAME, pid N, state STATE, uid N)", args[len(args)-1])
	}
	for i := 0; i < len(args); i += 2 {
		k, v := args[i], args[i+1]
		switch k {
		case "dev":
			f.Dev = v
		case "pid":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return f, fmt.Errorf("pid %q: not a process id", v)
			}
			f.PID = n
		case "state":
			// A misspelt state would select nothing and read as "no
			// such connections".
			f.State = strings.ToUpper(v)
			if !slices.ContainsFunc(cmcore.States(), func(s cmcore.State) bool { return s.String() == f.State }) {
				return f, fmt.Errorf("state %q: not a CM state (%s)", v, stateList())
			}
		case "uid":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return f, fmt.Errorf("uid %q: not a user id", v)
			}
			f.UID, f.ByUID = uint32(n), true
		default:
			return f, fmt.Errorf("unknown filter %q (dev NAME, pid N, state STATE, uid N)", k)
		}
	}
	return f, nil
}

func stateList() string {
	var names []string
	for _, s := range cmcore.States() {
		names = append(names, s.String())
	}
	return strings.ToLower(strings.Join(names, ", "))
}

// names reports whether f's device is d.
func (f Filter) names(d Device) bool {
	return f.Dev == d.Name || f.Dev == d.Node || f.Dev == filepath.Base(d.Node)
}

// CheckDevice fails when f names a device s does not have, served or
// not: a typo would otherwise print empty tables.
func (f Filter) CheckDevice(s Snapshot) error {
	if f.Dev == "" {
		return nil
	}
	var have []string
	for _, d := range s.Devices {
		if f.names(d) {
			return nil
		}
		have = append(have, d.Name+" ("+filepath.Base(d.Node)+")")
	}
	for _, u := range s.Unserved {
		if f.Dev == u.Name {
			return nil
		}
		have = append(have, u.Name+" (not served)")
	}
	if len(have) == 0 {
		have = append(have, "none")
	}
	return fmt.Errorf("dev %q: no such device or node (ucmd has %s)", f.Dev, strings.Join(have, ", "))
}

// Apply returns the part of s that f selects: the devices named, their
// files of the process and of the user, the ids in the state (and with
// State set, only the files that hold such an id), and the user's line
// of the limits.
func (f Filter) Apply(s Snapshot) Snapshot {
	out := s
	out.Devices = nil
	for _, d := range s.Devices {
		if f.Dev != "" && !f.names(d) {
			continue
		}
		nd := d
		nd.Files = nil
		for _, fl := range d.Files {
			if f.PID != 0 && fl.PID != f.PID || f.ByUID && fl.UID != f.UID {
				continue
			}
			nf := fl
			if f.State != "" {
				nf.IDs = nil
				for _, id := range fl.IDs {
					if strings.EqualFold(id.State, f.State) {
						nf.IDs = append(nf.IDs, id)
					}
				}
				if len(nf.IDs) == 0 {
					continue
				}
			}
			nd.Files = append(nd.Files, nf)
		}
		out.Devices = append(out.Devices, nd)
	}
	// The limits are the daemon's, over every device: only a uid filter
	// selects from them (its user).
	if f.ByUID {
		out.Limits.Users = nil
		for _, u := range s.Limits.Users {
			if u.UID == f.UID {
				out.Limits.Users = append(out.Limits.Users, u)
			}
		}
	}
	// Unserved devices have no files or ids: only a device filter keeps them.
	out.Unserved = nil
	if f.PID == 0 && f.State == "" && !f.ByUID {
		for _, u := range s.Unserved {
			if f.Dev == "" || f.Dev == u.Name {
				out.Unserved = append(out.Unserved, u)
			}
		}
	}
	return out
}

// neighbours says whether a port of devs counts neighbour resolutions
// (RoCE ports on umad).
func neighbours(devs []Device) bool {
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.Neighbours != nil {
				return true
			}
		}
	}
	return false
}

// WriteText prints a snapshot for people, in the spirit of
// `rdma resource show cm_id`: a table of ports, one of MAD counters and
// failed commands, the memory budget and refusals with a table of users,
// one of open files and one line per id, each table
// aligned over all its rows (a header line, "-" for what is unknown).
func WriteText(w io.Writer, s Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "ucmd %s, fabric %s, up since %s\n", s.Version, s.Fabric, s.Started.Format(time.RFC3339))

	fmt.Fprintf(tw, "\nDEV\tNODE\tGUID\tPORT\tLINK\tSTATE\tLID\tGID\n")
	for _, d := range s.Devices {
		if len(d.Ports) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\n", d.Name, d.Node, d.NodeGUID)
		}
		for _, p := range d.Ports {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", d.Name, d.Node, d.NodeGUID,
				p.Num, dash(p.LinkLayer), dash(p.State), p.LID, dash(p.GID0))
		}
	}

	if neighbours(s.Devices) {
		fmt.Fprintf(tw, "\nDEV\tPORT\tPEERS-RESOLVED\tUNREACHABLE\tNOT-ASKED\tWHY-NOT\n")
		for _, d := range s.Devices {
			for _, p := range d.Ports {
				if n := p.Neighbours; n != nil {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", d.Name, p.Num, n.Resolved, n.Failed, n.Unanswered, dash(n.Error))
				}
			}
		}
	}

	if len(s.Unserved) > 0 {
		fmt.Fprintf(tw, "\nNOT-SERVED\tSINCE\tNEXT-TRY\tREASON\n")
		for _, u := range s.Unserved {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Name, u.Since.UTC().Format(time.RFC3339), u.NextTry.UTC().Format(time.RFC3339), u.Reason)
		}
	}

	if len(s.Retired) > 0 {
		fmt.Fprintf(tw, "\nRETIRED-DEVICES\n%s\n", countList(s.Retired))
	}

	fmt.Fprintf(tw, "\nDEV\tSENT\tRECEIVED\tRETRANSMITTED\tTIMED-OUT\tDROPPED\tSEND-FAILED\tFAILED-COMMANDS\n")
	for _, d := range s.Devices {
		c := d.Counters
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", d.Name,
			c.Sent, c.Received, c.Retransmitted, c.TimedOut, c.Dropped, c.SendFailed, countList(d.Errors))
	}

	l := s.Limits
	fmt.Fprintf(tw, "\nMEMORY-CHARGED\tMEMORY-BUDGET\tCOPYING\tUSERS\tREFUSED-BY-LIMIT\n")
	fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\n", size(l.MemoryCharged), size(l.MemoryBudget), l.Copies, l.CopiesMax, len(l.Users), countList(l.Refused))

	fmt.Fprintf(tw, "\nUID\tFILES\tIDS\tIN-TIMEWAIT\tQUEUED\tWAITING\tCOPYING\tMEMORY\n")
	for _, u := range l.Users {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", u.UID, u.Files, u.IDs, u.Timewait, u.Events, u.Waiting, u.Copies, size(u.Memory))
	}

	fmt.Fprintf(tw, "\nDEV\tPID\tUID\tCOMM\tIDS\tQUEUED\tWAITING\tFOR-COPY\tOPENED\n")
	for _, d := range s.Devices {
		for _, f := range sortedFiles(d.Files) {
			opened := "-"
			if f.Opened != 0 {
				opened = time.Unix(f.Opened, 0).UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\n", d.Name, f.PID, f.UID, dash(f.Comm), len(f.IDs), f.Events, f.Waiting, f.CopyWaiting, opened)
		}
	}

	fmt.Fprintf(tw, "\nDEV\tPORT\tCM-ID\tPID\tCOMM\tSTATE\tSRV-ID\tLQPN\tRQPN\tLCOMM\tRCOMM\tRGID\tQUEUED\n")
	for _, d := range s.Devices {
		for _, f := range sortedFiles(d.Files) {
			for _, id := range f.IDs {
				port := "-"
				if id.Port != 0 {
					port = strconv.Itoa(id.Port)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%#x\t%#x\t%#08x\t%#08x\t%s\t%d\n",
					d.Name, port, id.ID, f.PID, dash(f.Comm), id.State, id.ServiceID,
					id.LocalQPN, id.RemoteQPN, id.LocalCommID, id.RemoteCommID, dash(id.RemoteGID), id.Events)
			}
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// size is n bytes for people: "512B", "5.3KiB", "1.5MiB", "2.0GiB".
func size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
}

// countList is "EINVAL=3,ENOMEM=1": counts by name, sorted; "-" for none.
func countList(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ",")
}

func sortedFiles(fs []File) []File {
	files := append([]File(nil), fs...)
	sort.SliceStable(files, func(i, j int) bool { return files[i].PID < files[j].PID })
	return files
}
