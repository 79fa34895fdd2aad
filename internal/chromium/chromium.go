// Package chromium finds and starts the headless Chromium that the
// dashboard's browser test and the chaos run drive through chromedp:
// Debian's package, which scripts/chromium.sh installs.
package chromium

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// Env names the variable that says where Chromium is, as
// scripts/chromium.sh prints it.
const Env = "GRANARY_CHROMIUM"

// names are the names Chromium's executable goes by, Debian's first.
var names = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// Find returns the Chromium to drive: explicit when set (a flag, or the
// value of Env), else the first of its usual names on PATH.
func Find(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found (tried %s): run scripts/chromium.sh, or set %s", strings.Join(names, ", "), Env)
}

// Start starts headless Chromium at path, with its profile in userDir,
// and returns a tab to drive and close, which closes the browser and
// waits (within 20 s) for its process to end: a process left behind
// would outlive the test or the run. It runs without Chromium's sandbox,
// which refuses root.
func Start(ctx context.Context, path, userDir string) (tab context.Context, closeBrowser func() error) {
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(userDir),
		chromedp.WindowSize(1400, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	return tab, func() error {
		defer cancelAlloc()
		defer cancelTab()
		closeCtx, cancelClose := context.WithTimeout(tab, 20*time.Second)
		defer cancelClose()
		if err := chromedp.Cancel(closeCtx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("closing Chromium: %w", err)
		}
		return nil
	}
}
