package status

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sample() Snapshot {
	return Snapshot{
		Version: "test", Fabric: "sim", Started: time.Unix(1700000000, 0).UTC(),
		Devices: []Device{{
			Name: "sim0", Node: "/dev/infiniband/ucm0", NodeGUID: "0002:c903:0000:0001",
			Ports:    []Port{{Num: 1, LinkLayer: "Ethernet", State: "ACTIVE", GID0: "fe80::1"}},
			Counters: MADCounter{Sent: 7, Received: 5, Retransmitted: 1, TimedOut: 0, Dropped: 2, SendFailed: 3},
			Files: []File{{PID: 4242, Events: 1, IDs: []ID{
				{ID: 3, State: "ESTABLISHED", ServiceID: 0x1234, LocalCommID: 0xabcd, RemoteCommID: 0x9876, Events: 1},
			}}},
		}},
	}
}

func TestServeAndFetch(t *testing.T) {
	dir := t.TempDir()
	want := sample()
	s, err := Listen(dir, ProviderFunc(func() Snapshot { return want }), nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	// A second daemon on the same directory is refused, the first keeps serving.
	if _, err := Listen(dir, ProviderFunc(sample), nil); err == nil || !strings.Contains(err.Error(), "another ucmd") {
		t.Fatalf("second Listen: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := Fetch(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Devices[0].Files[0].IDs[0] != want.Devices[0].Files[0].IDs[0] || got.Devices[0].Counters != want.Devices[0].Counters {
		t.Fatalf("fetched %+v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(ctx, dir); err == nil || !strings.Contains(err.Error(), "is ucmd serve running") {
		t.Fatalf("Fetch after Close: %v", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SocketName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(dir, ProviderFunc(sample), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, sample()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"dev sim0", "/dev/infiniband/ucm0", "file pid 4242", "cm_id 3", "state ESTABLISHED", "srv-id 0x0000000000001234", "lcomm 0x0000abcd", "retransmitted 1", "dropped 2", "send-failed 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}
