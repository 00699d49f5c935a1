package inbox

import (
	"bytes"
	"flag"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"testing"
)

// The app's icons (web/assets/icon-*.png) are drawn here, from the
// favicon's shapes: a white check on the inbox's blue. The test fails when
// the files differ from what it draws; -update-icons writes them.
var updateIcons = flag.Bool("update-icons", false, "write web/assets/icon-*.png")

// appIcon describes one icon file.
type appIcon struct {
	file     string
	size     int
	maskable bool
}

var appIcons = []appIcon{
	{"web/assets/icon-192.png", 192, false},
	{"web/assets/icon-512.png", 512, false},
	{"web/assets/icon-maskable-512.png", 512, true},
}

var (
	iconBlue  = color.NRGBA{0x1f, 0x4e, 0x79, 0xff}
	iconWhite = color.NRGBA{0xff, 0xff, 0xff, 0xff}
)

// iconLevels is how many shades an edge gets (anti-aliasing, kept to a
// small palette so that the files stay small).
const iconLevels = 4

// drawIcon draws an icon: in the favicon's 32-unit square, a rounded
// square (radius 7) with the check (8,16.5)→(13,21.5)→(24,10.5), stroke
// 3.5. A maskable icon fills the whole square and keeps the check in the
// middle 60%, inside the safe zone.
func drawIcon(ic appIcon) *image.Paletted {
	var pal color.Palette
	for a := 0; a <= iconLevels; a++ {
		for c := 0; c <= iconLevels; c++ {
			pal = append(pal, mix(c, a))
		}
	}
	img := image.NewPaletted(image.Rect(0, 0, ic.size, ic.size), pal)
	const ss = 4 // samples per side of a pixel
	unit := float64(ic.size) / 32
	for y := 0; y < ic.size; y++ {
		for x := 0; x < ic.size; x++ {
			var inBg, inCheck int
			for sy := 0; sy < ss; sy++ {
				for sx := 0; sx < ss; sx++ {
					px := (float64(x) + (float64(sx)+0.5)/ss) / unit
					py := (float64(y) + (float64(sy)+0.5)/ss) / unit
					if ic.maskable || inRoundedSquare(px, py) {
						inBg++
					}
					cx, cy := px, py
					if ic.maskable { // scale the check about the centre
						cx, cy = 16+(px-16)/0.75, 16+(py-16)/0.75
					}
					if onCheck(cx, cy) {
						inCheck++
					}
				}
			}
			a := (inBg*iconLevels + ss*ss/2) / (ss * ss)
			c := (inCheck*iconLevels + ss*ss/2) / (ss * ss)
			img.SetColorIndex(x, y, uint8(a*(iconLevels+1)+c))
		}
	}
	return img
}

// mix is the colour with check coverage c and background coverage a, in
// levels.
func mix(c, a int) color.NRGBA {
	f := float64(c) / iconLevels
	blend := func(p, q uint8) uint8 { return uint8(math.Round(float64(p)*(1-f) + float64(q)*f)) }
	alpha := max(a, c)
	return color.NRGBA{blend(iconBlue.R, iconWhite.R), blend(iconBlue.G, iconWhite.G), blend(iconBlue.B, iconWhite.B), uint8(alpha * 255 / iconLevels)}
}

func inRoundedSquare(x, y float64) bool {
	const r = 7.0
	if x < 0 || y < 0 || x > 32 || y > 32 {
		return false
	}
	cx, cy := math.Min(math.Max(x, r), 32-r), math.Min(math.Max(y, r), 32-r)
	return math.Hypot(x-cx, y-cy) <= r
}

func onCheck(x, y float64) bool {
	return segDist(x, y, 8, 16.5, 13, 21.5) <= 1.75 || segDist(x, y, 13, 21.5, 24, 10.5) <= 1.75
}

// segDist is the distance from (x, y) to the segment (ax, ay)–(bx, by).
func segDist(x, y, ax, ay, bx, by float64) float64 {
	dx, dy := bx-ax, by-ay
	t := math.Max(0, math.Min(1, ((x-ax)*dx+(y-ay)*dy)/(dx*dx+dy*dy)))
	return math.Hypot(x-(ax+t*dx), y-(ay+t*dy))
}

func encodeIcon(t *testing.T, ic appIcon) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&b, drawIcon(ic)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestAppIconsAreDrawnFromTheFavicon(t *testing.T) {
	for _, ic := range appIcons {
		want := encodeIcon(t, ic)
		if *updateIcons {
			if err := os.WriteFile(ic.file, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := webFS.ReadFile(ic.file)
		if err != nil {
			t.Fatalf("%s: %v (go test ./services/inbox -run TestAppIcons -update-icons writes it)", ic.file, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the test draws (go test ./services/inbox -run TestAppIcons -update-icons writes it)", ic.file)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(got))
		if err != nil || cfg.Width != ic.size || cfg.Height != ic.size {
			t.Errorf("%s: %dx%d (%v), want %dx%d", ic.file, cfg.Width, cfg.Height, err, ic.size, ic.size)
		}
		if len(got) > 16<<10 {
			t.Errorf("%s has %d bytes; an icon should stay small", ic.file, len(got))
		}
	}
	// A maskable icon is opaque to its edges.
	if c := drawIcon(appIcons[2]).At(0, 0).(color.NRGBA); c.A != 0xff {
		t.Errorf("the maskable icon's corner is %v, want opaque", c)
	}
}
