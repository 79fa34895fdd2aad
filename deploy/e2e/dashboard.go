package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/granaryio/granary/internal/chromium"
)

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
func screenshotDashboard(ctx context.Context, chromiumPath, url string, want int, out string, timeout time.Duration) (err error) {
	// The wait gets timeout; the browser's start, the page's load and the
	// picture get a minute more.
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "granary-e2e-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tab, closeBrowser := chromium.Start(ctx, chromiumPath, dir)
	defer func() {
		if cerr := closeBrowser(); cerr != nil && err == nil {
			err = cerr
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
