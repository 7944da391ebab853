package umad

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
)

// sysfs reads the RDMA classes under root (normally /sys).
type sysfs struct{ root string }

func (s sysfs) path(elem ...string) string {
	return filepath.Join(append([]string{s.root, "class"}, elem...)...)
}

// readTrim reads a sysfs attribute. sysfs hands out a whole attribute in
// the first read, so open+read+close suffice: three syscalls instead of
// os.ReadFile's five, which matters for GID tables of 1024 files.
func readTrim(path string) (string, error) {
	return readAt(unix.AT_FDCWD, path)
}

// readAt is readTrim of name relative to the directory dirfd.
func readAt(dirfd int, name string) (string, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var buf [256]byte // the longest attribute read here is a 39-byte GID
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "read", Path: name, Err: err}
		}
		return strings.TrimSpace(string(buf[:n])), nil
	}
}

// table is an open sysfs directory of numbered attributes (gids, pkeys,
// gid_attrs/types). Opening each file relative to it spares the kernel
// walking the whole path, class symlink included, once per file: a RoCE
// GID table of 1024 files reads in half the time under qemu TCG (rxe:
// 50-67 ms against 78-142).
type table struct {
	f    *os.File
	fd   int
	path string
}

func openTable(path string) (table, error) {
	f, err := os.Open(path)
	if err != nil {
		return table{}, err
	}
	return table{f: f, fd: int(f.Fd()), path: path}, nil
}

// indexes lists the table's numeric entries, in order.
func (t table) indexes() ([]int, error) {
	names, err := t.f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var idx []int
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return idx, nil
}

// read reads entry i; errors name the whole path.
func (t table) read(i int) (string, error) {
	v, err := readAt(t.fd, strconv.Itoa(i))
	if pe, ok := err.(*fs.PathError); ok {
		pe.Path = filepath.Join(t.path, pe.Path)
	}
	return v, err
}

func (t table) close() { t.f.Close() }

// parseGUID parses "0002:c903:0010:1234".
func parseGUID(s string) (uint64, error) {
	h := strings.ReplaceAll(s, ":", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 8 || len(s) != 19 {
		return 0, fmt.Errorf("malformed GUID %q", s)
	}
	return binary.BigEndian.Uint64(b), nil
}

// parseGID parses "fe80:0000:0000:0000:5054:00ff:fe77:0001".
func parseGID(s string) (hw.GID, error) {
	var g hw.GID
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil || len(b) != 16 || len(s) != 39 {
		return g, fmt.Errorf("malformed GID %q", s)
	}
	copy(g[:], b)
	return g, nil
}

// parseHex16 parses "0x1a" (lid, sm_lid, pkeys).
func parseHex16(s string) (uint16, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 16)
	if err != nil {
		return 0, fmt.Errorf("malformed hex value %q", s)
	}
	return uint16(v), nil
}

// parseState parses "4: ACTIVE".
func parseState(s string) (hw.PortState, error) {
	n, _, _ := strings.Cut(s, ":")
	v, err := strconv.ParseUint(n, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("malformed port state %q", s)
	}
	return hw.PortState(v), nil
}

func parseLinkLayer(s string) (hw.LinkLayer, error) {
	switch s {
	case "InfiniBand":
		return hw.LinkInfiniBand, nil
	case "Ethernet":
		return hw.LinkEthernet, nil
	}
	return 0, fmt.Errorf("unknown link layer %q", s)
}

// parseGIDType maps gid_attrs/types/N. The kernel names RoCE v1 and IB
// GIDs alike ("IB/RoCE v1"); the link layer tells them apart.
func parseGIDType(s string, ll hw.LinkLayer) (hw.GIDType, error) {
	switch s {
	case "IB/RoCE v1":
		if ll == hw.LinkEthernet {
			return hw.GIDTypeRoCEv1, nil
		}
		return hw.GIDTypeIB, nil
	case "RoCE v2":
		return hw.GIDTypeRoCEv2, nil
	}
	return 0, fmt.Errorf("unknown GID type %q", s)
}

// tableIndexes lists the numeric entries of a sysfs table directory.
func tableIndexes(dir string) ([]int, error) {
	t, err := openTable(dir)
	if err != nil {
		return nil, err
	}
	defer t.close()
	return t.indexes()
}

// portAttr reads ports/<num> of device dev. With prev, the snapshot read
// before, it is a background refresh and reads less (see gids); with
// prev nil, everything.
func (s sysfs) portAttr(dev string, num int, prev *hw.PortAttr) (hw.PortAttr, error) {
	var a hw.PortAttr
	dir := s.path("infiniband", dev, "ports", strconv.Itoa(num))
	read := func(name string) (string, error) { return readTrim(filepath.Join(dir, name)) }
	fail := func(what string, err error) (hw.PortAttr, error) {
		return hw.PortAttr{}, fmt.Errorf("read %s port %d %s: %w", dev, num, what, err)
	}

	ll, err := read("link_layer")
	if err != nil {
		return fail("link layer", err)
	}
	if a.LinkLayer, err = parseLinkLayer(ll); err != nil {
		return fail("link layer", err)
	}
	st, err := read("state")
	if err != nil {
		return fail("state", err)
	}
	if a.State, err = parseState(st); err != nil {
		return fail("state", err)
	}
	for _, f := range []struct {
		name string
		dst  *uint16
	}{{"lid", &a.LID}, {"sm_lid", &a.SMLID}} {
		v, err := read(f.name)
		if err != nil {
			return fail(f.name, err)
		}
		if *f.dst, err = parseHex16(v); err != nil {
			return fail(f.name, err)
		}
	}
	lmc, err := read("lid_mask_count")
	if err != nil {
		return fail("lid_mask_count", err)
	}
	v, err := strconv.ParseUint(lmc, 10, 3)
	if err != nil {
		return fail("lid_mask_count", fmt.Errorf("malformed LMC %q", lmc))
	}
	a.LMC = uint8(v)

	if a.GIDs, err = s.gids(dir, a.LinkLayer, prev); err != nil {
		return fail("GID table", err)
	}
	if len(a.GIDs) > 0 && a.GIDs[0].Index == 0 {
		a.SubnetPrefix = binary.BigEndian.Uint64(a.GIDs[0].GID[:8])
	}
	if prev != nil && a.LinkLayer == hw.LinkEthernet && prev.LinkLayer == hw.LinkEthernet {
		// A RoCE port's P_Key table is fixed (the default P_Key).
		a.PKeys = slices.Clone(prev.PKeys)
		return a, nil
	}
	if a.PKeys, err = s.pkeys(dir); err != nil {
		return fail("P_Key table", err)
	}
	return a, nil
}

// gids reads the populated GID entries. RoCE tables have holes: an empty
// slot reads as the zero GID, or fails with EINVAL on newer kernels.
//
// With prev (a refresh of a RoCE port), it reads only up to gidLookahead
// slots past the highest entry, prev's or one it finds on the way. The
// kernel's GID cache puts a new GID in the lowest free slot
// (ib_cache_gid_add), so GIDs added since prev fill its holes and then the
// slots after its highest entry, one after the other (an address brings
// two on a port with both RoCE types); a slot whose GID was deleted while
// still in use reads as empty but is not free until the last user lets
// go, so a GID added meanwhile lands past it. A removed entry reads as
// empty. A RoCE table has 1024 slots (rxe: 50 ms of reads under qemu TCG,
// BenchmarkPortRefresh in test/e2e) of which a few are used; reading all
// of them every refresh cost a busy daemon 15% of its CPU. The full read
// once a minute sees what lies further.
func (s sysfs) gids(dir string, ll hw.LinkLayer, prev *hw.PortAttr) ([]hw.GIDEntry, error) {
	gids, err := openTable(filepath.Join(dir, "gids"))
	if err != nil {
		return nil, err
	}
	defer gids.close()
	idx, err := gids.indexes()
	if err != nil {
		return nil, err
	}
	limit := math.MaxInt
	// Only RoCE tables are filled from the lowest free slot, and only
	// they have 1,024 slots: an InfiniBand port's GIDs (the port GUID and
	// the alias GUIDs an SM assigns, at indexes it chooses) are read whole.
	lookahead := prev != nil && ll == hw.LinkEthernet
	if lookahead {
		limit = gidLookahead - 1 // prev empty: GIDs added start at slot 0
		if n := len(prev.GIDs); n > 0 {
			limit = prev.GIDs[n-1].Index + gidLookahead
		}
	}
	// gid_attrs/types, opened at the first entry. Old kernels have no
	// gid_attrs; the type then is the default.
	var types *table
	opened := false
	var out []hw.GIDEntry
	for _, i := range idx {
		if i > limit {
			break
		}
		v, err := gids.read(i)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || isEINVAL(err) {
				continue
			}
			return nil, err
		}
		g, err := parseGID(v)
		if err != nil {
			return nil, fmt.Errorf("gids/%d: %w", i, err)
		}
		if g.IsZero() {
			continue
		}
		if lookahead {
			limit = max(limit, i+gidLookahead)
		}
		e := hw.GIDEntry{Index: i, GID: g, Type: hw.GIDTypeIB}
		if ll == hw.LinkEthernet {
			e.Type = hw.GIDTypeRoCEv1
		}
		if !opened {
			opened = true
			if t, err := openTable(filepath.Join(dir, "gid_attrs", "types")); err == nil {
				types = &t
				defer t.close()
			}
		}
		if types != nil {
			if t, err := types.read(i); err == nil {
				if e.Type, err = parseGIDType(t, ll); err != nil {
					return nil, fmt.Errorf("gid_attrs/types/%d: %w", i, err)
				}
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// entriesHold reads GID slot g.Index (and its type on RoCE) and, on
// InfiniBand, P_Key slot pkeyIndex of a port whose link layer is ll, and
// reports whether they still hold g and pkey. An empty GID slot that fails
// to read (EINVAL on newer kernels, as gids skips it) does not hold; other
// read errors are returned.
func (s sysfs) entriesHold(dev string, num int, ll hw.LinkLayer, g hw.GIDEntry, pkeyIndex int, pkey uint16) (bool, error) {
	dir := s.path("infiniband", dev, "ports", strconv.Itoa(num))
	v, err := readTrim(filepath.Join(dir, "gids", strconv.Itoa(g.Index)))
	if errors.Is(err, fs.ErrNotExist) || isEINVAL(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if got, err := parseGID(v); err != nil || got != g.GID {
		return false, nil
	}
	if ll == hw.LinkEthernet {
		// As gids reads it: a type that cannot be read (no gid_attrs
		// before 4.9) is the default.
		typ := hw.GIDTypeRoCEv1
		if t, err := readTrim(filepath.Join(dir, "gid_attrs", "types", strconv.Itoa(g.Index))); err == nil {
			if typ, err = parseGIDType(t, ll); err != nil {
				return false, nil
			}
		}
		return typ == g.Type, nil
	}
	v, err = readTrim(filepath.Join(dir, "pkeys", strconv.Itoa(pkeyIndex)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // the table shrank
	}
	if err != nil {
		return false, err
	}
	got, err := parseHex16(v)
	return err == nil && got == pkey, nil
}

// gidLookahead is how many slots past the highest GID a refresh reads.
const gidLookahead = 8

func (s sysfs) pkeys(dir string) ([]uint16, error) {
	pkeys, err := openTable(filepath.Join(dir, "pkeys"))
	if err != nil {
		return nil, err
	}
	defer pkeys.close()
	idx, err := pkeys.indexes()
	if err != nil {
		return nil, err
	}
	var out []uint16
	for _, i := range idx {
		if i != len(out) {
			return nil, fmt.Errorf("pkeys/%d missing", len(out))
		}
		v, err := pkeys.read(i)
		if err != nil {
			return nil, err
		}
		p, err := parseHex16(v)
		if err != nil {
			return nil, fmt.Errorf("pkeys/%d: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// umadPorts maps "device/port" to the umad device name (umadN).
func (s sysfs) umadPorts() (map[string]string, error) {
	ents, err := os.ReadDir(s.path("infiniband_mad"))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil // ib_umad not loaded
	}
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "umad") {
			continue // abi_version, and the issmN nodes of the same class
		}
		dev, err := readTrim(s.path("infiniband_mad", name, "ibdev"))
		if err != nil {
			return nil, fmt.Errorf("read %s ibdev: %w", name, err)
		}
		port, err := readTrim(s.path("infiniband_mad", name, "port"))
		if err != nil {
			return nil, fmt.Errorf("read %s port: %w", name, err)
		}
		m[dev+"/"+port] = name
	}
	return m, nil
}
