package abi

import "encoding/binary"

// ne is the order of the kernel's host-order fields; be that of __be fields.
var (
	ne = binary.NativeEndian
	be = binary.BigEndian
)

// Struct is implemented by pointers to every wire struct of the package.
type Struct interface {
	// Size is the C sizeof of the struct.
	Size() int
	// Encode writes the struct to b[:Size()], reserved bytes as zero.
	// It panics if len(b) < Size(), like binary.ByteOrder.PutUint32.
	Encode(b []byte)
	// Decode reads the struct from b. Bytes beyond len(b) read as zero,
	// so Decode accepts any input; reserved bytes are ignored.
	Decode(b []byte)
}

// fit returns b[:n] and panics if len(b) < n; a plain b[:n] would silently
// reach into spare capacity.
func fit(b []byte, n int) []byte { return b[:n:len(b)] }
