package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumNames are the names Chromium's executable goes by, Debian's
// first.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// findChromium returns the Chromium to drive: explicit when set (the
// -chromium flag or GRANARY_CHROMIUM, as scripts/chromium.sh prints it),
// else the first of chromiumNames on PATH.
func findChromium(explicit string, lookPath func(string) (string, error)) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	for _, name := range chromiumNames {
		if p, err := lookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found (tried %s): run scripts/chromium.sh, or pass -chromium", strings.Join(chromiumNames, ", "))
}

// silosShownJS is true once the dashboard's silos table has a row per
// silo and every one says active.
const silosShownJS = `(() => {
	const rows = document.querySelectorAll('#silos tbody tr[data-silo]');
	const badges = Array.from(document.querySelectorAll('#silos tbody tr[data-silo] .badge'), b => b.textContent);
	return rows.length === %d && badges.length === %d && badges.every(s => s === 'active');
})()`

// screenshotDashboard loads the dashboard at url in headless Chromium,
// waits up to timeout until its silos table lists want active silos,
// and saves a full-page screenshot as a PNG at out: when the wait fails
// too, with an error that says what the page shows.
func screenshotDashboard(ctx context.Context, chromium, url string, want int, out string, timeout time.Duration) (err error) {
	// The wait gets timeout; the browser's start, the page's load and the
	// picture get a minute more.
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "granary-e2e-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // Chromium refuses to run as root with its sandbox
		chromedp.DisableGPU,
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1400, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	defer func() {
		// Close the browser and wait for its process to end.
		closeCtx, cancelClose := context.WithTimeout(tab, 20*time.Second)
		defer cancelClose()
		if cerr := chromedp.Cancel(closeCtx); cerr != nil && !errors.Is(cerr, context.Canceled) && err == nil {
			err = fmt.Errorf("closing Chromium: %w", cerr)
		}
	}()
	if err := chromedp.Do(tab, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("loading the dashboard %s: %w", url, err)
	}
	js := fmt.Sprintf(silosShownJS, want, want)
	_, waitErr := chromedp.Run(tab, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if waitErr != nil {
		// Say what the page shows instead, and keep its picture.
		shown, err := chromedp.Run(tab, chromedp.Evaluate[string](pageShownJS))
		if err != nil {
			shown = "(unreadable: " + err.Error() + ")"
		}
		waitErr = fmt.Errorf("waiting for the dashboard %s to list %d active silos: %w; it shows %s", url, want, waitErr, shown)
	}
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		return errors.Join(waitErr, fmt.Errorf("screenshot of %s: %w", url, err))
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return errors.Join(waitErr, err)
	}
	return errors.Join(waitErr, os.WriteFile(out, png, 0o644))
}

// pageShownJS describes what the dashboard shows: its silos and their
// status, the unreachable members, the feed's state and any problem.
const pageShownJS = `(() => {
	const silos = Array.from(document.querySelectorAll('#silos tbody tr'), r => (r.dataset.silo || '?') + '=' + ((r.querySelector('.badge') || {}).textContent || r.textContent.trim()));
	const down = Array.from(document.querySelectorAll('#unreachable tbody tr'), r => r.textContent.trim());
	const problem = (document.getElementById('problem') || {}).textContent || '';
	const feed = (document.getElementById('feed') || {}).textContent || '';
	return 'silos [' + silos.join(', ') + '], unreachable [' + down.join('; ') + '], feed ' + feed + (problem ? ', problem: ' + problem : '');
})()`
