package config

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes written for people: a whole number with an
// optional unit, B, KB/KiB/Ki, MB/MiB/Mi, GB/GiB/Gi (powers of 1024 for all
// of them, as memory limits are usually meant), for example "64MiB".
// +kubebuilder:validation:Pattern=`^[0-9]+\s*([KMGT]i?B?|B)?$`
type ByteSize string

var byteUnits = map[string]int64{
	"": 1, "B": 1,
	"K": 1 << 10, "KB": 1 << 10, "KI": 1 << 10, "KIB": 1 << 10,
	"M": 1 << 20, "MB": 1 << 20, "MI": 1 << 20, "MIB": 1 << 20,
	"G": 1 << 30, "GB": 1 << 30, "GI": 1 << 30, "GIB": 1 << 30,
	"T": 1 << 40, "TB": 1 << 40, "TI": 1 << 40, "TIB": 1 << 40,
}

// Bytes parses the size.
func (b ByteSize) Bytes() (int64, error) {
	s := strings.TrimSpace(string(b))
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a size: write a whole number with an optional unit, such as 256MiB or 1GiB", string(b))
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", string(b), err)
	}
	unit, ok := byteUnits[strings.ToUpper(strings.TrimSpace(s[i:]))]
	if !ok {
		return 0, fmt.Errorf("%q has an unknown unit %q: use B, KiB, MiB, GiB or TiB", string(b), strings.TrimSpace(s[i:]))
	}
	if n > (1<<62)/unit {
		return 0, fmt.Errorf("%q is too large", string(b))
	}
	return n * unit, nil
}

// FormatBytes writes n bytes the way ByteSize reads them, for messages.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%dB", n)
	}
}
