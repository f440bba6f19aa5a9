package gpulock

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Forever is the duration "forever" parses to: a wait that never ends by
// itself.
const Forever = time.Duration(math.MaxInt64)

// longestMs is the longest finite duration ParseDuration accepts, ten years
// in milliseconds: anything longer is a typo, as offload-lock sees it.
const longestMs = 315_360_000_000.0

// ErrDuration is returned (wrapped) by ParseDuration for text outside the
// grammar.
var ErrDuration = errors.New("not a duration (0, seconds such as 1.5, 500ms, 42s, 5m, 2h, 1d, " +
	"a compound such as 1h30m, or forever)")

var durationUnits = []struct {
	name string
	ms   float64
}{{"d", 86_400_000}, {"h", 3_600_000}, {"m", 60_000}, {"s", 1000}, {"ms", 1}}

// ParseDuration reads a duration exactly as the offload-lock command reads
// its DUR arguments (--wait, --ttl, --expect, --within): "0"; seconds as a
// decimal number ("1.5"); a number with ms, s, m, h or d ("500ms", "2h",
// "1d"); a compound of those with each unit smaller than the one before
// ("1h30m", "2m30s", "1d12h", "1m0.5s"); or "forever" (Forever). The result
// is rounded up to whole milliseconds. Anything else is an error wrapping
// ErrDuration: empty, negative, a sign, spaces, junk, a unit repeated or
// out of order, more than ten years. It is not time.ParseDuration: "1d" is a
// day here, and "1us" or "-1s" are refused, as the command refuses them.
//
// The grammar is the command's own (offload_lock::parse_duration); the
// tests compare the two on a table of inputs.
func ParseDuration(text string) (time.Duration, error) {
	if text == "forever" {
		return Forever, nil
	}
	total, ok := 0.0, false
	if v, isNumber := plainDecimal(text); isNumber {
		total, ok = v*1000, true
	} else {
		total, ok = compoundMs(text)
	}
	if ok {
		total = math.Ceil(total)
		ok = !math.IsInf(total, 0) && !math.IsNaN(total) && total <= longestMs
	}
	if !ok {
		return 0, &durationError{text}
	}
	return time.Duration(int64(total)) * time.Millisecond, nil
}

type durationError struct{ text string }

func (e *durationError) Error() string { return strconv.Quote(e.text) + ": " + ErrDuration.Error() }
func (e *durationError) Unwrap() error { return ErrDuration }

// plainDecimal: digits with at most one '.', at least one digit and at most
// 18 of them, as a number.
func plainDecimal(s string) (float64, bool) {
	dots, digits := 0, 0
	for _, c := range s {
		switch {
		case c == '.':
			dots++
		case c >= '0' && c <= '9':
			digits++
		default:
			return 0, false
		}
	}
	if dots > 1 || digits == 0 || digits > 18 {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// compoundMs: groups of a number and a unit, each unit smaller than the
// one before, in milliseconds.
func compoundMs(text string) (float64, bool) {
	if text == "" {
		return 0, false
	}
	total, at, next := 0.0, 0, 0
	for at < len(text) {
		numEnd := at + strings.IndexFunc(text[at:], func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
		if numEnd < at || numEnd == at {
			return 0, false // the number runs to the end (no unit), or there is none
		}
		unitEnd := numEnd + strings.IndexFunc(text[numEnd:], func(r rune) bool { return r < 'a' || r > 'z' })
		if unitEnd < numEnd {
			unitEnd = len(text)
		}
		unit := text[numEnd:unitEnd]
		u := next
		for u < len(durationUnits) && unit != durationUnits[u].name {
			u++
		}
		if u == len(durationUnits) {
			return 0, false
		}
		v, ok := plainDecimal(text[at:numEnd])
		if !ok {
			return 0, false
		}
		total += v * durationUnits[u].ms
		next = u + 1
		at = unitEnd
	}
	return total, true
}

// DescribeDuration shows a duration as the command does: "850ms", "42s",
// "5m12s", "2h03m" (whole units, truncated; negative with a '-').
func DescribeDuration(d time.Duration) string {
	ms := d.Milliseconds()
	sign := ""
	if ms < 0 {
		sign = "-"
		if ms == math.MinInt64 {
			ms = math.MaxInt64
		} else {
			ms = -ms
		}
	}
	two := func(v int64) string {
		if v < 10 {
			return "0" + strconv.FormatInt(v, 10)
		}
		return strconv.FormatInt(v, 10)
	}
	if ms < 1000 {
		return sign + strconv.FormatInt(ms, 10) + "ms"
	}
	s := ms / 1000
	if s < 60 {
		return sign + strconv.FormatInt(s, 10) + "s"
	}
	if s < 3600 {
		return sign + strconv.FormatInt(s/60, 10) + "m" + two(s%60) + "s"
	}
	return sign + strconv.FormatInt(s/3600, 10) + "h" + two(s/60%60) + "m"
}
