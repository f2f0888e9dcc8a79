package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadPassfile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string
		wantErr error
	}{
		{"lf", "secret\n", "secret", nil},
		{"crlf", "secret\r\n", "secret", nil},
		{"no newline", "secret", "secret", nil},
		{"first line only", "secret\nsecond line\n", "secret", nil},
		{"crlf first line only", "secret\r\nsecond\r\n", "secret", nil},
		{"inner spaces kept", "  two words \n", "  two words ", nil},
		{"inner cr kept", "a\rb\n", "a\rb", nil},
		{"empty file", "", "", errEmptyPassphrase},
		{"empty first line", "\nsecret\n", "", errEmptyPassphrase},
		{"only crlf", "\r\n", "", errEmptyPassphrase},
		{"too long", strings.Repeat("x", maxPassphraseBytes+1), "", errPassphraseLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pass")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readPassfile(path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("readPassfile = %q, %v; want error %v", got, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name the passfile", err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("readPassfile = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestReadPassfileMissing(t *testing.T) {
	_, err := readPassfile(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
}

func TestPassfileWinsOverStdin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(path, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdin := pipeWith(t, "from-stdin\n")
	got, err := passphraseSource{passFlags: passFlags{passfile: path}, stdin: stdin}.read(true)
	if err != nil || string(got) != "from-file" {
		t.Fatalf("read = %q, %v; want from-file", got, err)
	}
}

// pipeWith returns the read end of a pipe (not a terminal) holding content.
func pipeWith(t *testing.T, content string) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := w.WriteString(content); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return r
}

func TestReadPassphraseFromStdinPipe(t *testing.T) {
	tests := []struct {
		name    string
		stdin   string
		want    string
		wantErr error
	}{
		{"line", "hunter2\n", "hunter2", nil},
		{"crlf", "hunter2\r\n", "hunter2", nil},
		{"no newline at EOF", "hunter2", "hunter2", nil},
		// A pipe is read once even for init: there is nobody to confirm.
		{"second line ignored", "hunter2\nhunter3\n", "hunter2", nil},
		{"empty", "", "", errEmptyPassphrase},
		{"empty line", "\n", "", errEmptyPassphrase},
	}
	for _, tt := range tests {
		for _, confirm := range []bool{false, true} {
			stdin := pipeWith(t, tt.stdin)
			got, err := passphraseSource{stdin: stdin, prompt: &bytes.Buffer{}}.read(confirm)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("%s (confirm=%v): read = %q, %v; want %v", tt.name, confirm, got, err, tt.wantErr)
				}
				continue
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("%s (confirm=%v): read = %q, %v; want %q", tt.name, confirm, got, err, tt.want)
			}
		}
	}
}

func TestReadPassLineConsumesOneLine(t *testing.T) {
	r := strings.NewReader("first\nrest")
	got, err := readPassLine(r)
	if err != nil || string(got) != "first" {
		t.Fatalf("readPassLine = %q, %v", got, err)
	}
	if r.Len() != len("rest") {
		t.Errorf("%d bytes left after the line, want %d", r.Len(), len("rest"))
	}
}

func TestReadPassAll(t *testing.T) {
	// The background child gets the exact bytes, newlines included.
	got, err := readPassAll(strings.NewReader("pass\nwith newline"))
	if err != nil || string(got) != "pass\nwith newline" {
		t.Fatalf("readPassAll = %q, %v", got, err)
	}
	if _, err := readPassAll(strings.NewReader("")); !errors.Is(err, errEmptyPassphrase) {
		t.Errorf("empty: err = %v", err)
	}
	if _, err := readPassAll(strings.NewReader(strings.Repeat("y", maxPassphraseBytes+1))); !errors.Is(err, errPassphraseLength) {
		t.Errorf("too long: err = %v", err)
	}
	long := strings.Repeat("z", maxPassphraseBytes)
	if got, err := readPassAll(strings.NewReader(long)); err != nil || string(got) != long {
		t.Errorf("max length: %d bytes, %v", len(got), err)
	}
}

func TestAppendWipingWipesOldArray(t *testing.T) {
	buf := make([]byte, 0, 2)
	buf = appendWiping(buf, 'a')
	buf = appendWiping(buf, 'b')
	old := buf[:cap(buf)]
	buf = appendWiping(buf, 'c')
	if string(buf) != "abc" {
		t.Fatalf("buf = %q", buf)
	}
	if !bytes.Equal(old, []byte{0, 0}) {
		t.Errorf("old array not wiped: %q", old)
	}
}

// TestRunExtpass: --extpass takes the first line a program prints, as a
// passfile's; a program that fails or prints nothing gives an error and no
// passphrase; one value is split at spaces, several are taken as they
// are; --extpass and --passfile together are refused.
func TestRunExtpass(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{"first line", []string{"printf", `secret\nsecond\n`}, "secret", ""},
		{"one value split at spaces", []string{"echo two words"}, "two words", ""},
		{"arguments kept whole", []string{"sh", "-c", "echo '  spaced  '"}, "  spaced  ", ""},
		{"crlf", []string{"printf", `pw\r\n`}, "pw", ""},
		{"no newline", []string{"printf", "pw"}, "pw", ""},
		{"fails", []string{"sh", "-c", "echo secret; exit 3"}, "", "exit status 3"},
		{"prints nothing", []string{"true"}, "", errEmptyPassphrase.Error()},
		{"missing program", []string{"/nonexistent/askpass"}, "", "no such file"},
		{"empty", []string{"  "}, "", "no program"},
		{"much output", []string{"sh", "-c", "echo pw; head -c 3000000 /dev/zero"}, "", "no passphrase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var prompt bytes.Buffer
			src := passphraseSource{passFlags: passFlags{extpass: tt.args}, stdin: os.Stdin, prompt: &prompt}
			got, err := src.read(true)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != nil {
					t.Fatalf("read = %q, %v; want error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("read = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	src := passphraseSource{passFlags: passFlags{passfile: "/dev/null", extpass: []string{"echo x"}}, stdin: os.Stdin, prompt: &bytes.Buffer{}}
	if _, err := src.read(false); !errors.Is(err, errUsage) {
		t.Errorf("--passfile with --extpass: %v, want a usage error", err)
	}
}
