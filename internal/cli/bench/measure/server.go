package measure

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
)

// ServerCommands reads a FerretDB server's request counters by command
// from its debug handler (nil when it cannot).
func ServerCommands(debugAddr string) map[string]int64 {
	out := map[string]int64{}
	resp, err := http.Get("http://" + debugAddr + "/debug/metrics")
	if err != nil {
		return out
	}
	defer func() { _ = resp.Body.Close() }()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "ferretdb_client_requests_total{") {
			continue
		}
		_, rest, ok := strings.Cut(line, `command="`)
		if !ok {
			continue
		}
		cmd, rest, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			out[cmd] += int64(v)
		}
	}
	return out
}
