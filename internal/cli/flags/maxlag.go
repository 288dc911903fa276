package flags

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxLag is the value of a --max-lag flag (ferry cutover, kubectl
// mongoferry cutover): a duration of whole seconds from 1s to 1h ("5s",
// "2m"), or a bare number of seconds as kubectl mongoferry took it before.
type MaxLag struct {
	// Seconds is the lag in seconds; 0 until the flag is set, unless the
	// command gives a default.
	Seconds int
}

// String implements pflag.Value.
func (m *MaxLag) String() string {
	if m.Seconds == 0 {
		return ""
	}
	return (time.Duration(m.Seconds) * time.Second).String()
}

// Type implements pflag.Value.
func (m *MaxLag) Type() string { return "duration" }

// Set implements pflag.Value.
func (m *MaxLag) Set(s string) error {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if n, nerr := strconv.Atoi(s); nerr == nil {
		d, err = time.Duration(n)*time.Second, nil
	}
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 5s or 2m (or a number of seconds)", s)
	}
	if d < time.Second || d > time.Hour || d%time.Second != 0 {
		return fmt.Errorf("%s is not a whole number of seconds from 1s to 1h", d)
	}
	m.Seconds = int(d / time.Second)
	return nil
}
