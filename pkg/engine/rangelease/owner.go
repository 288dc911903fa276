package rangelease

import (
	"fmt"
	"os"
	"time"

	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// DefaultTTL is how long a copier may go silent before its range is
// taken over: it renews after every batch and every second while it
// skips orphans.
const DefaultTTL = 20 * time.Second

// Owner names this process in the range leases: its pod (or host) and
// process id.
func Owner() string {
	owner := os.Getenv(workerapi.EnvPodName)
	if owner == "" {
		owner, _ = os.Hostname()
	}
	return fmt.Sprintf("%s/%d", owner, os.Getpid())
}
