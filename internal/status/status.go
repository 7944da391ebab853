// Package status is ucmd's control socket: the daemon answers a snapshot of
// its devices, open files, ids and MAD counters; `ucmd status` prints it.
//
// The protocol is one JSON document per connection: the client connects and
// reads until EOF. The socket is created 0600 in the runtime directory, so
// only root reads another user's connections.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"text/tabwriter"
	"time"
)

// SocketName is the control socket's name in the runtime directory.
const SocketName = "ucmd.sock"

// Snapshot is the whole state at one moment.
type Snapshot struct {
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	Fabric  string    `json:"fabric"` // "umad" or "sim"
	Devices []Device  `json:"devices"`
}

// Device is one RDMA device served as /dev/infiniband/ucmN.
type Device struct {
	Name     string     `json:"name"`
	Node     string     `json:"node"` // e.g. /dev/infiniband/ucm0
	NodeGUID string     `json:"node_guid"`
	Ports    []Port     `json:"ports"`
	Files    []File     `json:"files"`
	Counters MADCounter `json:"counters"`
}

// Port is one port of a device.
type Port struct {
	Num       int    `json:"num"`
	LinkLayer string `json:"link_layer"`
	State     string `json:"state"`
	LID       uint16 `json:"lid,omitempty"`
	GID0      string `json:"gid0,omitempty"`
}

// File is one open file of a ucm device.
type File struct {
	PID    int   `json:"pid"`
	Events int   `json:"queued_events"`
	IDs    []ID  `json:"ids"`
	Opened int64 `json:"opened_unix,omitempty"`
}

// ID is one ucm id.
type ID struct {
	ID           uint32 `json:"id"`
	State        string `json:"state"`
	ServiceID    uint64 `json:"service_id"`
	LocalCommID  uint32 `json:"local_comm_id"`
	RemoteCommID uint32 `json:"remote_comm_id"`
	Events       int    `json:"queued_events"`
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
}

// Listen creates the control socket in dir, replacing a stale one.
func Listen(dir string, p Provider, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	path := filepath.Join(dir, SocketName)
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("status socket %s: another ucmd is running", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("status socket: %w", err)
	}
	s := &Server{ln: ln, p: p, log: log}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("status socket accept", "err", err)
			}
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := json.NewEncoder(c).Encode(s.p.Snapshot()); err != nil {
				s.log.Debug("status socket write", "err", err)
			}
		}()
	}
}

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
		return snap, fmt.Errorf("connect to ucmd at %s (is ucmd serve running?): %w", path, err)
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

// WriteText prints a snapshot for people, in the spirit of
// `rdma resource show cm_id`: one line per device, port and id.
func WriteText(w io.Writer, s Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "ucmd %s, fabric %s, up since %s\n", s.Version, s.Fabric, s.Started.Format(time.RFC3339))
	for _, d := range s.Devices {
		c := d.Counters
		fmt.Fprintf(tw, "\ndev %s\tnode %s\tguid %s\n", d.Name, d.Node, d.NodeGUID)
		fmt.Fprintf(tw, "  mads\tsent %d\treceived %d\tretransmitted %d\ttimed-out %d\tdropped %d\tsend-failed %d\n",
			c.Sent, c.Received, c.Retransmitted, c.TimedOut, c.Dropped, c.SendFailed)
		for _, p := range d.Ports {
			fmt.Fprintf(tw, "  port %d\t%s\t%s\tlid %d\tgid %s\n", p.Num, p.LinkLayer, p.State, p.LID, p.GID0)
		}
		files := append([]File(nil), d.Files...)
		sort.Slice(files, func(i, j int) bool { return files[i].PID < files[j].PID })
		for _, f := range files {
			fmt.Fprintf(tw, "  file pid %d\tids %d\tqueued %d\n", f.PID, len(f.IDs), f.Events)
			for _, id := range f.IDs {
				fmt.Fprintf(tw, "    cm_id %d\tstate %s\tsrv-id %#016x\tlcomm %#08x\trcomm %#08x\tqueued %d\n",
					id.ID, id.State, id.ServiceID, id.LocalCommID, id.RemoteCommID, id.Events)
			}
		}
	}
	return tw.Flush()
}
