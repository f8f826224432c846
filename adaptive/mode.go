package adaptive

import "time"

// Mode is the cluster's protection level.
type Mode uint8

const (
	Normal Mode = iota
	Moderate
	Aggressive
	Critical
)

// String returns the mode's name as shown in metrics and the state view.
func (m Mode) String() string {
	switch m {
	case Moderate:
		return "moderate"
	case Aggressive:
		return "aggressive"
	case Critical:
		return "critical"
	}
	return "normal"
}

// MarshalText makes modes readable in JSON.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Policy is what the request path does in the current mode. It is a small
// value read with one atomic load.
type Policy struct {
	Mode Mode `json:"mode"`
	// BlockFree rejects FREE and anonymous requests (Aggressive and up).
	BlockFree bool `json:"block_free"`
	// HeavyOff answers 503 on routes marked heavy (Aggressive and up).
	HeavyOff bool `json:"heavy_off"`
	// PremiumOnly lets only PREMIUM requests reach the upstream; the others
	// get a cached answer or a degraded one (Critical).
	PremiumOnly bool `json:"premium_only"`
	// CacheOnly serves GETs on cached routes from the response cache (Critical).
	CacheOnly bool `json:"cache_only"`
	// Strict asks the store for every decision (lease size 1) (Aggressive
	// and up). Not in Moderate: leases already shrink to 1 as a key nears its
	// limit, and a gateway pushed into Moderate by its own CPU would only
	// spend more CPU on store calls (a loop that feeds itself).
	Strict bool `json:"strict"`
	// Multiplier scales every rate limit: exactly 1 in Normal mode.
	Multiplier float64 `json:"multiplier"`
}

// Transition is one mode change.
type Transition struct {
	At       time.Time `json:"at"`
	From     Mode      `json:"from"`
	To       Mode      `json:"to"`
	Pressure float64   `json:"pressure"`
}

// machine turns pressure samples into modes and multipliers: escalation is
// immediate (protection first), stepping down needs the pressure to stay
// under the current mode's threshold (minus a margin; under exit_critical
// for Critical) for a hold time, after a minimum dwell, one mode at a time;
// after a step down the multiplier ramps up over RampUp instead of jumping.
// It is not safe for concurrent use: the controller's loop owns it.
type machine struct {
	cfg *Config

	mode       Mode
	since      time.Time // entered the current mode
	below      time.Time // pressure has been low enough to step down since (zero: not)
	rampFrom   float64   // multiplier when the last step down happened
	rampStart  time.Time // zero: no ramp
	rateAvg    float64   // moving average of the request rate (per second)
	spiking    bool
	multiplier float64
}

func newMachine(cfg *Config, now time.Time) *machine {
	return &machine{cfg: cfg, since: now, multiplier: 1}
}

func (m *machine) threshold(mode Mode) float64 {
	switch mode {
	case Moderate:
		return m.cfg.Thresholds.Moderate
	case Aggressive:
		return m.cfg.Thresholds.Aggressive
	case Critical:
		return m.cfg.Thresholds.Critical
	}
	return 0
}

// target is the mode a pressure asks for, without hysteresis.
func (m *machine) target(p float64) Mode {
	t := m.cfg.Thresholds
	switch {
	case p >= t.Critical:
		return Critical
	case p >= t.Aggressive:
		return Aggressive
	case p >= t.Moderate:
		return Moderate
	}
	return Normal
}

// step feeds one sample: the effective pressure and the request rate (per
// second) over the last interval. It returns the transition, if any.
func (m *machine) step(now time.Time, p, rate float64, interval time.Duration) (Transition, bool) {
	var tr Transition
	changed := false
	want := m.target(p)
	switch {
	case want > m.mode:
		tr, changed = m.move(now, want, p), true
	case want < m.mode:
		exit := m.threshold(m.mode) - m.cfg.ExitMargin
		hold := m.cfg.ExitHold
		if m.mode == Critical {
			exit, hold = m.cfg.ExitCritical, m.cfg.ExitCriticalHold
		}
		if p >= exit {
			m.below = time.Time{}
			break
		}
		if m.below.IsZero() {
			m.below = now
		}
		if now.Sub(m.below) >= hold && now.Sub(m.since) >= m.cfg.MinDwell {
			tr, changed = m.move(now, m.mode-1, p), true
		}
	default:
		m.below = time.Time{}
	}
	m.updateSpike(rate, interval)
	m.multiplier = m.computeMultiplier(now, p)
	return tr, changed
}

func (m *machine) move(now time.Time, to Mode, p float64) Transition {
	tr := Transition{At: now, From: m.mode, To: to, Pressure: p}
	if to < m.mode {
		m.rampFrom, m.rampStart = m.multiplier, now
	} else {
		m.rampStart = time.Time{}
	}
	m.mode, m.since, m.below = to, now, time.Time{}
	return tr
}

// updateSpike keeps the request rate's moving average (about 10 s) and
// flags a spike: a rate above SpikeFactor × the average from Moderate mode
// up. In Normal mode a spike cuts nothing: the configured limits hold
// exactly while the system is healthy, and a burst that the limits admit is
// the customers' right.
func (m *machine) updateSpike(rate float64, interval time.Duration) {
	alpha := min(1, interval.Seconds()/10)
	if m.rateAvg == 0 {
		m.rateAvg = rate
	}
	m.spiking = m.mode >= Moderate && m.rateAvg > 1 && rate > m.cfg.SpikeFactor*m.rateAvg
	m.rateAvg += alpha * (rate - m.rateAvg)
}

// computeMultiplier: 1 in Normal mode, 1 − pressure from Moderate up (at
// least 0.05, and at most 1 − the mode's threshold), cut by SpikeCut during
// a spike (Moderate and up), and ramping up from its value at the last step
// down.
func (m *machine) computeMultiplier(now time.Time, p float64) float64 {
	if m.mode == Normal {
		m.rampStart = time.Time{}
		return 1 // configured limits hold exactly while the system is healthy
	}
	target := 1.0
	if m.mode > Normal {
		// While a mode lasts, its threshold is the least pressure it
		// assumes: limits do not grow back inside the hysteresis band.
		target = max(0.05, 1-max(p, m.threshold(m.mode)))
	}
	if m.spiking {
		target *= 1 - m.cfg.SpikeCut
	}
	if !m.rampStart.IsZero() {
		f := float64(now.Sub(m.rampStart)) / float64(m.cfg.RampUp)
		if f >= 1 {
			m.rampStart = time.Time{}
		} else if ramp := m.rampFrom + (target-m.rampFrom)*f; ramp < target {
			target = ramp
		}
	}
	return min(1, target)
}

// policy is the request path's view of the machine's state.
func (m *machine) policy() Policy {
	return policyFor(m.mode, m.multiplier)
}

func policyFor(mode Mode, mult float64) Policy {
	return Policy{
		Mode:        mode,
		Strict:      mode >= Aggressive,
		BlockFree:   mode >= Aggressive,
		HeavyOff:    mode >= Aggressive,
		PremiumOnly: mode >= Critical,
		CacheOnly:   mode >= Critical,
		Multiplier:  mult,
	}
}
