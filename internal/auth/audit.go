package auth

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"requestId"`
	Principal string    `json:"principal"`
	Groups    []string  `json:"groups,omitempty"`
	AuthBy    string    `json:"authBy"`
	Peer      string    `json:"peer,omitempty"`
	Method    string    `json:"method"`
	Object    string    `json:"object,omitempty"`
	// Outcome is the call's gRPC code: OK, PermissionDenied, ...
	Outcome string `json:"outcome"`
	// Message is the error's message when the call failed.
	Message    string  `json:"message,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// Audit writes audit entries as JSON lines. Rotation is the operator's:
// the file is opened in append mode, so logrotate's copytruncate works, and
// Reopen (on SIGHUP) follows a rename.
type Audit struct {
	mu   sync.Mutex
	path string
	w    io.Writer
	f    *os.File
}

// OpenAudit opens the audit log: "-" is standard output, anything else a
// file appended to (created with mode 0600).
func OpenAudit(path string) (*Audit, error) {
	a := &Audit{path: path}
	if path == "-" {
		a.w = os.Stdout
		return a, nil
	}
	if err := a.Reopen(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reopen opens the file again, after the operator moved it away.
func (a *Audit) Reopen() error {
	if a.path == "" || a.path == "-" {
		return nil
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	a.mu.Lock()
	old := a.f
	a.f, a.w = f, f
	a.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Write appends one entry; a failed write is returned for the caller to
// log (the call itself has already happened).
func (a *Audit) Write(e AuditEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err = a.w.Write(b)
	return err
}

// Close closes the file.
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		return a.f.Close()
	}
	return nil
}
