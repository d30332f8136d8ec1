package memory

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

var binaryUnits = [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// FormatBytes renders n bytes for people: "512 B" below 1 KiB, otherwise two
// decimals in the largest binary unit that keeps the number under 1024, as
// in "916.00 MiB" or "6.00 GiB". Negative counts get a leading minus.
func FormatBytes(n int64) string {
	if n < 0 {
		return "-" + formatMagnitude(uint64(-(n+1))+1)
	}
	return formatMagnitude(uint64(n))
}

func formatMagnitude(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v := float64(n) / 1024
	i := 0
	// Move up a unit when two decimals would round to 1024.00.
	for v >= 1024-0.005 && i < len(binaryUnits)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " " + binaryUnits[i]
}

var unitFactors = map[string]int64{
	"":    1,
	"b":   1,
	"kb":  1e3,
	"kib": 1 << 10,
	"mb":  1e6,
	"mib": 1 << 20,
	"gb":  1e9,
	"gib": 1 << 30,
	"tb":  1e12,
	"tib": 1 << 40,
}

// ParseBytes reads a byte count such as "123", "512MiB", "2GiB", "1.5GB" or
// "100 KiB". Units are case-insensitive: B, KB, MB, GB and TB are powers of
// 1000, KiB, MiB, GiB and TiB powers of 1024; no unit means bytes. A
// fractional result is rounded to the nearest byte.
func ParseBytes(s string) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("memory: bad byte size %q: %s", s, why)
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return bad("empty")
	}
	i, dots, digits := 0, 0, 0
	for ; i < len(t); i++ {
		c := t[i]
		if c == '.' {
			dots++
		} else if c >= '0' && c <= '9' {
			digits++
		} else {
			break
		}
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if digits == 0 || dots > 1 {
		return bad("want a non-negative number followed by an optional unit, as in 512MiB")
	}
	factor, ok := unitFactors[strings.ToLower(unit)]
	if !ok {
		return bad(fmt.Sprintf("unknown unit %q (want B, KB, KiB, MB, MiB, GB, GiB, TB or TiB)", unit))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return bad("want a non-negative number followed by an optional unit, as in 512MiB")
	}
	r.Mul(r, new(big.Rat).SetInt64(factor))
	// Round half up: floor(r + 1/2).
	r.Add(r, big.NewRat(1, 2))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return bad("too large")
	}
	return q.Int64(), nil
}
