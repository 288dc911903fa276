package peer

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mongoferry/mongoferry/internal/ferretdb"
)

// tool is one side of the benchmark: a process that copies from source to
// target, then replays the source's oplog until stopped.
type tool interface {
	name() string
	// command returns the tool's command line for the two servers, after
	// writing its configuration into dir.
	command(dir string, src, dst *ferretdb.Server) ([]string, error)
}

// process is a started tool.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{}
	log     string
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// stop interrupts the tool (so that it flushes a CPU profile) and kills it
// when it has not exited 10 s later.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// startTool writes t's configuration into its own directory under dir
// and starts it, its output into a log file there.
func startTool(t tool, dir string, src, dst *ferretdb.Server) (*process, error) {
	d := filepath.Join(dir, strings.ToLower(t.name()))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	args, err := t.command(d, src, dst)
	if err != nil {
		return nil, err
	}
	logName := filepath.Join(d, "output.log")
	logFile, err := os.Create(logName)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = d
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &process{cmd: cmd, exited: make(chan struct{}), log: logName}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// freePort returns a loopback port free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// hostURI is a server's address as a plain mongodb:// URI.
func hostURI(s *ferretdb.Server) string { return "mongodb://" + s.Addr }

// mongoShake is MongoShake's collector in sync_mode all (full copy, then
// oplog replay) with its defaults, writing its checkpoint to the target.
type mongoShake struct{ bin string }

func (mongoShake) name() string { return "MongoShake" }

func (m mongoShake) command(dir string, src, dst *ferretdb.Server) ([]string, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	conf := fmt.Sprintf(`conf.version = 10
id = mongoshake
master_quorum = false
full_sync.http_port = %d
incr_sync.http_port = %d
system_profile_port = %d
log.level = info
log.dir = %s
log.file = collector.log
log.flush = false
sync_mode = all
mongo_urls = %s
mongo_connect_mode = standalone
tunnel = direct
tunnel.address = %s
tunnel.message = raw
filter.ddl_enable = false
checkpoint.storage.url = %s
checkpoint.storage.db = mongoshake
checkpoint.storage.collection = ckpt_default
checkpoint.start_position = 1970-01-01T00:00:00Z
full_sync.collection_exist_drop = true
full_sync.create_index = none
incr_sync.mongo_fetch_method = oplog
`, ports[0], ports[1], ports[2], filepath.Join(dir, "logs"), hostURI(src), hostURI(dst), hostURI(dst))
	name := filepath.Join(dir, "collector.conf")
	if err := os.WriteFile(name, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{m.bin, "-conf", name, "-verbose", "2"}, nil
}

// mongoFerry is `ferry run` of a fullAndIncremental task with the task's
// defaults and no verification (MongoShake verifies nothing either).
type mongoFerry struct{ bin, cpuProfile string }

func (mongoFerry) name() string { return "MongoFerry" }

func (m mongoFerry) command(dir string, src, dst *ferretdb.Server) ([]string, error) {
	task := fmt.Sprintf("name: bench-peer\nmode: fullAndIncremental\nsource: {uri: %q}\ntarget: {uri: %q}\nverify: {mode: none}\n", src.URI, dst.URI)
	name := filepath.Join(dir, "task.yaml")
	if err := os.WriteFile(name, []byte(task), 0o600); err != nil {
		return nil, err
	}
	args := []string{m.bin, "run", "-f", name, "--listen", "", "--progress", "log", "--progress-interval", "5s", "--log-level", "debug"}
	if m.cpuProfile != "" {
		prof, err := filepath.Abs(m.cpuProfile)
		if err != nil {
			return nil, err
		}
		args = append(args, "--cpuprofile", prof)
	}
	return args, nil
}
