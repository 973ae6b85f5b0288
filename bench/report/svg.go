package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Chart geometry of one SVG panel (pixels).
const (
	svgWidth     = 760
	svgPanelH    = 340
	svgMarginL   = 70
	svgMarginR   = 150
	svgMarginT   = 36
	svgMarginB   = 44
	svgMaxNines  = 5 // x axis ends at p99.999
	svgLineWidth = 2
)

// targetColors gives each known target a fixed colour; others cycle through
// svgPalette.
var targetColors = map[string]string{
	TargetDirect:      "#7f7f7f",
	"sluice-gnet":     "#1f77b4",
	"sluice-fasthttp": "#17becf",
	TargetNginx:       "#2ca02c",
	"haproxy":         "#ff7f0e",
}

var svgPalette = []string{"#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#d62728"}

// SVG writes a chart of the latency percentile distribution of every target,
// one panel per workload, in HdrHistogram's style: the x axis is the
// percentile on a "nines" scale (log10 of 1/(1−p): 0, 90%, 99%, … 99.999%),
// the y axis latency in µs on a log scale.
func (c *Comparison) SVG(w io.Writer) error {
	var workloads []string
	byWL := map[string][]Row{}
	for _, r := range c.Rows {
		l := r.Label()
		if _, ok := byWL[l]; !ok {
			workloads = append(workloads, l)
		}
		byWL[l] = append(byWL[l], r)
	}
	h := svgPanelH * max(len(workloads), 1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, h, svgWidth, h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for i, wl := range workloads {
		panel(&b, wl, byWL[wl], i*svgPanelH)
	}
	if len(workloads) == 0 {
		fmt.Fprintf(&b, `<text x="20" y="40">no results</text>`+"\n")
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func nines(p float64) float64 {
	if p >= 100 {
		return svgMaxNines
	}
	return math.Min(math.Log10(100/(100-p)), svgMaxNines)
}

func panel(b *strings.Builder, wl string, rows []Row, top int) {
	x0, x1 := float64(svgMarginL), float64(svgWidth-svgMarginR)
	y0, y1 := float64(top+svgPanelH-svgMarginB), float64(top+svgMarginT)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		for _, p := range r.Distribution {
			if p.ValueUs > 0 {
				lo, hi = math.Min(lo, p.ValueUs), math.Max(hi, p.ValueUs)
			}
		}
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s: latency by percentile</text>`+"\n",
		svgMarginL, top+20, html.EscapeString(wl))
	if math.IsInf(lo, 1) {
		fmt.Fprintf(b, `<text x="%d" y="%d">no latency data</text>`+"\n", svgMarginL, top+60)
		return
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	px := func(n float64) float64 { return x0 + (x1-x0)*n/svgMaxNines }
	py := func(v float64) float64 {
		return y0 - (y0-y1)*(math.Log10(v)-dlo)/(dhi-dlo)
	}
	// Axes and grid.
	fmt.Fprintf(b, `<g stroke="#ddd">`)
	for d := dlo; d <= dhi; d++ {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x0, py(math.Pow(10, d)), x1, py(math.Pow(10, d)))
	}
	for n := 0; n <= svgMaxNines; n++ {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, px(float64(n)), y0, px(float64(n)), y1)
	}
	b.WriteString("</g>\n")
	for d := dlo; d <= dhi; d++ {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, py(math.Pow(10, d))+4, durationLabel(math.Pow(10, d)))
	}
	pl := []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%"}
	for n := 0; n <= svgMaxNines; n++ {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(float64(n)), y0+16, pl[n])
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">percentile</text>`+"\n", (x0+x1)/2, y0+34)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", x0, y1, x1-x0, y0-y1)
	// Series and legend.
	for i, r := range rows {
		color, ok := targetColors[r.Target]
		if !ok {
			color = svgPalette[i%len(svgPalette)]
		}
		var pts strings.Builder
		for _, p := range r.Distribution {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(nines(p.Percentile)), py(p.ValueUs))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%d" points="%s"/>`+"\n", color, svgLineWidth, strings.TrimSpace(pts.String()))
		ly := y1 + 8 + float64(i)*18
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, x1+12, ly, x1+32, ly, color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x1+38, ly+4, html.EscapeString(r.Target))
	}
}

// durationLabel formats a power-of-ten microsecond value: 1µs, 10µs, 1ms, 1s.
func durationLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gms", v/1e3)
	case v >= 1:
		return fmt.Sprintf("%gµs", v)
	}
	return fmt.Sprintf("%gns", v*1e3)
}
