package chromium

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePATH makes a directory of executables with the given names and
// makes it the whole PATH.
func fakePATH(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	return dir
}

func TestFind(t *testing.T) {
	tests := []struct {
		explicit string
		have     []string
		want     string // a name in the fake PATH, or the explicit path
	}{
		{explicit: "/opt/chrome/chrome", have: []string{"chromium"}, want: "/opt/chrome/chrome"},
		{have: []string{"google-chrome", "chromium"}, want: "chromium"},
		{have: []string{"google-chrome"}, want: "google-chrome"},
	}
	for _, tt := range tests {
		dir := fakePATH(t, tt.have...)
		want := tt.want
		if tt.explicit == "" {
			want = filepath.Join(dir, tt.want)
		}
		if got, err := Find(tt.explicit); err != nil || got != want {
			t.Errorf("Find(%q) with %v on PATH = %q, %v; want %q", tt.explicit, tt.have, got, err, want)
		}
	}
	fakePATH(t)
	if _, err := Find(""); err == nil || !strings.Contains(err.Error(), "scripts/chromium.sh") {
		t.Errorf("no Chromium: %v, want an error saying how to get one", err)
	}
}
