package memory

import (
	"math"
	"strings"
	"testing"
)

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1.00 KiB"},
		{1536, "1.50 KiB"},
		{916 * MiB, "916.00 MiB"},
		{6 * GiB, "6.00 GiB"},
		{4*GiB + 481*MiB, "4.47 GiB"},
		{MiB - 1, "1.00 MiB"}, // not "1024.00 KiB"
		{1 << 40, "1.00 TiB"},
		{-2 * KiB, "-2.00 KiB"},
		{math.MaxInt64, "8.00 EiB"},
		{math.MinInt64, "-8.00 EiB"},
	} {
		if got := FormatBytes(tc.n); got != tc.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"123", 123},
		{"0", 0},
		{"512MiB", 512 * MiB},
		{"512mib", 512 * MiB},
		{"2GiB", 2 * GiB},
		{"2 GiB", 2 * GiB},
		{" 2gib ", 2 * GiB},
		{"1.5GB", 1_500_000_000},
		{"1.5GiB", 3 * GiB / 2},
		{"100KiB", 100 * KiB},
		{"100kb", 100_000},
		{"7B", 7},
		{"7b", 7},
		{"3MB", 3_000_000},
		{"1TB", 1_000_000_000_000},
		{"1TiB", 1 << 40},
		{".5KiB", 512},
		{"1.KiB", 1024},
		{"0.1KB", 100},
		{"1.0005KB", 1001}, // 1000.5 rounds half up
		{"8388607TiB", 8388607 << 40},
	} {
		got, err := ParseBytes(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"   ", "empty"},
		{"MiB", "non-negative number"},
		{"-5MiB", "non-negative number"},
		{"+5MiB", "non-negative number"},
		{"1.2.3MiB", "non-negative number"},
		{".", "non-negative number"},
		{"12XB", `unknown unit "XB"`},
		{"12 M", `unknown unit "M"`},
		{"1e3", `unknown unit "e3"`},
		{"inf", "non-negative number"},
		{"NaN", "non-negative number"},
		{"5 MiB extra", `unknown unit "MiB extra"`},
		{"8388608TiB", "too large"},
		{"99999999999999999999", "too large"},
	} {
		_, err := ParseBytes(tc.in)
		if err == nil {
			t.Errorf("ParseBytes(%q) succeeded", tc.in)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.why) || !strings.Contains(msg, `"`+tc.in+`"`) {
			t.Errorf("ParseBytes(%q) error %q, want it to name the string and say %q", tc.in, msg, tc.why)
		}
	}
}

func TestFormatParseRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 512, 1024, 3 * MiB, 6 * GiB, 1 << 40} {
		s := strings.ReplaceAll(FormatBytes(n), " ", "")
		got, err := ParseBytes(s)
		if err != nil || got != n {
			t.Errorf("ParseBytes(FormatBytes(%d) = %q) = %d, %v", n, s, got, err)
		}
	}
}
