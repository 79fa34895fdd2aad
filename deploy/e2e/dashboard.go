package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/cdproto/security"
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

// loginShownJS is true once the dashboard, refused its data without a
// token (401), shows its token form.
const loginShownJS = `(() => !document.getElementById('login').hidden &&
	document.getElementById('feed').textContent === 'locked')()`

// submitTokenJS types the token into the form and submits it, which runs
// the page's own submit handler, as a user would.
const submitTokenJS = `(() => {
	document.getElementById('token').value = %q;
	document.getElementById('login').requestSubmit();
	return true;
})()`

// screenshotDashboard loads the dashboard at url in headless Chromium,
// signs in with token when the page asks for one, waits up to timeout
// until its silos table lists want active silos, and saves a full-page
// screenshot as a PNG at out: when the wait fails too, with an error that
// says what the page shows.
//
// The admin server's certificate is signed by the cluster's own CA, which
// Chromium does not know, so the tab ignores certificate errors. The run's
// Go clients verify the same server against the CA all along.
func screenshotDashboard(ctx context.Context, chromiumPath, url, token string, want int, out string, timeout time.Duration) (err error) {
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
	if _, err := chromedp.Call(tab, security.SetIgnoreCertificateErrors, security.SetIgnoreCertificateErrorsParams{Ignore: true}); err != nil {
		return fmt.Errorf("telling Chromium to accept the cluster CA's certificates: %w", err)
	}
	if err := chromedp.Do(tab, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("loading the dashboard %s: %w", url, err)
	}
	waitErr := signIn(tab, token, timeout)
	if waitErr == nil {
		js := fmt.Sprintf(silosShownJS, want, want)
		_, waitErr = chromedp.Run(tab, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	}
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

// signIn waits up to timeout for the dashboard's token form and submits
// token through it.
func signIn(tab context.Context, token string, timeout time.Duration) error {
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](loginShownJS, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
		return fmt.Errorf("waiting for the dashboard to ask for the admin token: %w", err)
	}
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](fmt.Sprintf(submitTokenJS, token))); err != nil {
		return fmt.Errorf("submitting the admin token: %w", err)
	}
	return nil
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
