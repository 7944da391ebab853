package cmcore

import "time"

// convertToMs turns an IBTA 5-bit time value (4.096 µs · 2^x) into
// milliseconds the way cm.c's cm_convert_to_ms does: 1 << max(x-8, 0).
// There is deliberately no clamp, like v5.x; x is at most 31 on the wire.
func convertToMs(x uint8) uint64 {
	if x > 8 {
		return 1 << (x - 8)
	}
	return 1
}

func msDuration(ms uint64) time.Duration { return time.Duration(ms) * time.Millisecond }

// ackTimeout is cm_ack_timeout: the smallest t with
// 4.096µs·2^t ≥ 4.096µs·2^ackDelay + 2·4.096µs·2^plt, capped at 31.
func ackTimeout(ackDelay, plt uint8) uint8 {
	t := int(plt) + 1
	ad := int(ackDelay)
	if t >= ad {
		if ad >= t-1 {
			t++
		}
	} else {
		t = ad
		if int(plt)+1 >= ad-1 {
			t++
		}
	}
	if t > 31 {
		t = 31
	}
	return uint8(t)
}
