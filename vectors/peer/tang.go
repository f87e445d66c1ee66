//go:build unix

package peer

import (
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TangServer is Debian's tang server on 127.0.0.1, run by socat once per
// connection, for the clevis interop tests.
type TangServer struct {
	URL string
	// Adv is the advertisement its /adv serves (a JWS), as
	// `curl URL/adv > adv.jws` saves it.
	Adv []byte
	// Dir holds its keys.
	Dir   string
	socat *exec.Cmd
}

// Tangd is where Debian's tang package keeps its programs.
const (
	tangd       = "/usr/libexec/tangd"
	tangdKeygen = "/usr/libexec/tangd-keygen"
)

// Tang starts a tang server with new keys (tangd-keygen) on a free port of
// 127.0.0.1, or skips the test (fails it in CI) without tang and socat.
// It is stopped when the test ends.
func Tang(t testing.TB) *TangServer {
	t.Helper()
	Require(t, tangd, tangdKeygen, "socat")
	s := &TangServer{Dir: t.TempDir()}
	if out, err := exec.Command(tangdKeygen, s.Dir).CombinedOutput(); err != nil {
		t.Fatalf("tangd-keygen: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	s.socat = exec.Command("socat", "TCP-LISTEN:"+strconv.Itoa(port)+",bind=127.0.0.1,fork,reuseaddr",
		"EXEC:"+tangd+" "+s.Dir)
	// A group of its own, so that Stop ends the tangd children serving
	// open connections too.
	s.socat.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.socat.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/adv")
		if err == nil {
			s.Adv, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tang on %s did not answer: %v", s.URL, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the server: its socat listener and the tangd processes it
// started; connections are refused from then on.
func (s *TangServer) Stop() {
	if s.socat != nil && s.socat.Process != nil {
		syscall.Kill(-s.socat.Process.Pid, syscall.SIGKILL)
		s.socat.Wait()
		s.socat = nil
	}
}
