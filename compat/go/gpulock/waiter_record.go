package gpulock

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// waiterRecord is one decoded registry entry.
type waiterRecord struct {
	pid      int64
	label    string
	host     string
	since    int64
	gpu      int
	gpus     int
	priority int
	expectMs int64
	slots    []int
}

// utf8BOM is skipped at the start of an entry, as offload-lock's JSON parser
// does.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// parseWaiterRecord decodes an entry as offload-lock does (parse_waiter,
// src/registry.cpp): it must be one JSON object (valid UTF-8 without unpaired
// surrogate escapes, nothing after it, an optional leading byte-order mark)
// whose "pid" is an integer literal in 1..2^31-1. Keys are matched exactly
// (case-sensitively); of a repeated key the last counts. Every other key is
// optional and falls back to its default when absent or of another type:
// label and host "" unless strings; since 0 unless an integer; gpu -1 unless
// an integer in 0..1023 (null included); gpus 1 unless an integer in
// 1..1024; priority 0 unless an integer, clamped to -100..100; expectMs 0
// unless a positive integer; slots nil unless an array of at most 64,
// keeping its integers in 0..1023. Integers of 2^63..2^64-1 wrap round to
// negative values wherever a signed one is read, as in offload-lock. Keys
// an older offload-lock wrote (bootId, procTicks, queuedUs, pidNs) are
// ignored: arrival and liveness come from the file, not from its words.
func parseWaiterRecord(data []byte) (waiterRecord, bool) {
	data = bytes.TrimPrefix(data, utf8BOM)
	// encoding/json would replace invalid UTF-8 and unpaired surrogate
	// escapes with U+FFFD; offload-lock rejects the entry.
	if !utf8.Valid(data) || hasUnpairedSurrogate(data) {
		return waiterRecord{}, false
	}
	var obj map[string]json.RawMessage
	// A top-level null decodes into a nil map without error: not an object.
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return waiterRecord{}, false
	}
	pid, ok := rawInt(obj["pid"])
	if !ok || pid <= 0 || pid > 1<<31-1 {
		return waiterRecord{}, false
	}
	r := waiterRecord{pid: pid, gpu: -1, gpus: 1}
	r.label = rawString(obj["label"])
	r.host = rawString(obj["host"])
	if v, ok := rawWrappedInt(obj["since"]); ok {
		r.since = v
	}
	if v, ok := rawInt(obj["gpu"]); ok && v >= 0 && v < maxGPUSlots {
		r.gpu = int(v)
	}
	if v, ok := rawInt(obj["gpus"]); ok && v >= 1 && v <= maxGPUSlots {
		r.gpus = int(v)
	}
	if v, ok := rawWrappedInt(obj["priority"]); ok {
		if v < minPriority {
			v = minPriority
		} else if v > maxPriority {
			v = maxPriority
		}
		r.priority = int(v)
	}
	if v, ok := rawWrappedInt(obj["expectMs"]); ok && v > 0 {
		r.expectMs = v
	}
	var slots []json.RawMessage
	if json.Unmarshal(obj["slots"], &slots) == nil && len(slots) <= maxListedSlots {
		for _, raw := range slots {
			if v, ok := rawInt(raw); ok && v >= 0 && v < maxGPUSlots {
				r.slots = append(r.slots, int(v))
			}
		}
	}
	return r, true
}

// hasUnpairedSurrogate reports whether data (syntactically valid JSON) holds
// a \uD800-\uDFFF escape that is not a high surrogate followed directly by
// a low one. Backslashes occur only inside strings, so every one starts an
// escape.
func hasUnpairedSurrogate(data []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // a two-character escape such as \\ or \"
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

// rawInt returns raw as an int64 when it is a JSON integer literal (no
// fraction or exponent: 3.0 and 1e2 are not integers) that fits.
func rawInt(raw json.RawMessage) (int64, bool) {
	if !isIntegerLiteral(raw) {
		return 0, false
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	return v, err == nil
}

// rawWrappedInt returns raw as an int64 when it is a JSON integer literal
// that fits an int64 or a uint64; 2^63 and up wrap round to negative values,
// as offload-lock reads them.
func rawWrappedInt(raw json.RawMessage) (int64, bool) {
	if v, ok := rawInt(raw); ok {
		return v, true
	}
	if u, ok := rawUint(raw); ok {
		return int64(u), true
	}
	return 0, false
}

// rawUint returns raw as a uint64 when it is a non-negative JSON integer
// literal that fits.
func rawUint(raw json.RawMessage) (uint64, bool) {
	if !isIntegerLiteral(raw) || raw[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	return v, err == nil
}

// isIntegerLiteral reports whether raw (one JSON value, as json.RawMessage
// holds it after decoding) is a number without fraction or exponent.
func isIntegerLiteral(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	s := raw
	if s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
