package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"
)

// watcher runs one target's background work: the active health checks every
// interval when a path is configured, and the re-probe of an ejected target
// once its ejection has run out.
type watcher struct {
	t        *target
	check    HealthCheckConfig
	ejectFor time.Duration
}

func (w *watcher) run(ctx context.Context) {
	var tick <-chan time.Time
	if w.check.Path != "" {
		ticker := time.NewTicker(w.check.Interval)
		defer ticker.Stop()
		tick = ticker.C
	}
	reprobe := time.NewTimer(time.Hour)
	reprobe.Stop()
	defer reprobe.Stop()
	if w.t.ejectedUntil.Load() != 0 {
		w.scheduleReprobe(reprobe)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			w.recordCheck(w.probe(ctx))
		case <-w.t.ejectCh:
			w.scheduleReprobe(reprobe)
		case <-reprobe.C:
			if err := w.probe(ctx); err != nil {
				w.t.ejectedUntil.Store(time.Now().Add(w.ejectFor).UnixNano())
				w.scheduleReprobe(reprobe)
				continue
			}
			w.t.readmit()
		}
	}
}

// scheduleReprobe arms timer for the end of the target's ejection.
func (w *watcher) scheduleReprobe(timer *time.Timer) {
	until := w.t.ejectedUntil.Load()
	if until == 0 {
		return
	}
	timer.Reset(time.Until(time.Unix(0, until)))
}

// probe checks the target once: GET path when one is configured, else a TCP
// connection.
func (w *watcher) probe(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if w.check.Path == "" {
		c, err := w.t.probe.DialTimeout(w.t.probe.Addr, w.check.Timeout)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.URI().SetSchemeBytes(w.t.scheme)
	req.URI().SetHostBytes(w.t.host)
	req.URI().SetPath(w.check.Path)
	resp.SkipBody = true
	if err := w.t.probe.DoTimeout(req, resp, w.check.Timeout); err != nil {
		return err
	}
	if code := resp.StatusCode(); code < 200 || code >= 400 {
		return fmt.Errorf("%s answered %d", w.check.Path, code)
	}
	return nil
}

// recordCheck moves the target's health after enough agreeing results.
func (w *watcher) recordCheck(err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	t := w.t
	good := err == nil
	if good == t.probeGood {
		t.probeRun++
	} else {
		t.probeGood, t.probeRun = good, 1
	}
	healthy := t.healthy.Load()
	switch {
	case healthy && !good && t.probeRun >= w.check.UnhealthyThreshold:
		t.healthy.Store(false)
		slog.Warn("upstream target failed its health checks", "upstream", t.pool, "target", t.url, "error", err)
	case !healthy && good && t.probeRun >= w.check.HealthyThreshold:
		t.healthy.Store(true)
		slog.Info("upstream target passed its health checks", "upstream", t.pool, "target", t.url)
	default:
		return
	}
	t.updateHealthGauge()
}
