package pgserver

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// Credential returns the user a PostgreSQL server started by this process
// runs as: nil (this process's user) unless this process is root, then
// the "postgres" user.
func Credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the postgres user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Start creates a cluster in a new temporary directory, starts its server
// and waits until it accepts connections. On error nothing is left
// behind.
func Start(opts Options) (_ *Server, err error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	cred, err := Credential()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, dir: dir, bin: bin, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			s.opts.KeepDir = false
			_ = s.Stop()
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown %s to postgres: %w", dir, err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.DataDir(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := s.run(cred); err != nil {
		return nil, err
	}
	if err := s.waitReady(); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts the postgres server in the background. The process gets
// SIGQUIT (immediate shutdown) if the thread that started it exits: that
// thread is locked to a goroutine that lives exactly as long as the server,
// so the signal comes only when this process itself dies.
func (s *Server) run(cred *syscall.Credential) error {
	logf, err := os.Create(filepath.Join(s.dir, "postgres.log"))
	if err != nil {
		return err
	}
	if cred != nil {
		_ = logf.Chown(int(cred.Uid), int(cred.Gid))
	}
	s.cmd = exec.Command(filepath.Join(s.bin, "postgres"), s.serverArgs()...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := s.cmd.Start(); err != nil {
			started <- err
			close(s.exited)
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		_ = logf.Close()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	return nil
}
