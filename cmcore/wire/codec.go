package wire

import (
	"errors"
	"fmt"

	"github.com/ucmd/ucmd/hw"
)

// Encode writes m as a complete CM MAD with transaction ID tid into mad,
// overwriting all 256 bytes. It fails, leaving mad unspecified, if a field
// does not fit its wire width or private data, ARI or info is too long.
func Encode(mad *hw.MAD, tid uint64, m Message) error {
	return errors.New("wire.Encode: not implemented")
}

// Decode parses a received CM MAD. It fails for MADs that are not CM class
// version 2 SENDs (ErrNotCM), for attributes other than the eleven messages
// (ErrUnknownAttribute) and for ARI/info lengths past their area
// (ErrBadLength); the header is returned whenever it could be read.
func Decode(mad *hw.MAD) (Header, Message, error) {
	h, err := DecodeHeader(mad)
	if err != nil {
		return h, nil, err
	}
	return h, nil, fmt.Errorf("decode attribute %#04x: %w", h.AttrID, ErrUnknownAttribute)
}
