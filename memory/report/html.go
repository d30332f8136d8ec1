package report

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/memfit/memfit/memory"
)

// hoverData is what the page's script needs to describe the point under the
// mouse. S holds one row per drawn sample: from, to, point index, reserved,
// event kind (-1 for the starting point), event size, event category, site
// index (-1: none), step, microseconds since the first event (-1 for the
// starting point), then the bytes of each category.
type hoverData struct {
	Left   float64   `json:"left"`
	Right  float64   `json:"right"`
	N      int       `json:"n"`
	Kinds  []string  `json:"kinds"`
	Cats   []string  `json:"cats"`
	Colors []string  `json:"colors"`
	Order  []int     `json:"order"`
	Sites  []string  `json:"sites"`
	S      [][]int64 `json:"s"`
}

const hoverFixed = 10 // columns of a row of hoverData.S before the categories

func (c *chart) hoverData() hoverData {
	tl := c.tl
	d := hoverData{Left: plotLeft, Right: plotRight, N: len(tl.Points)}
	for k := memory.EventAlloc; k <= memory.EventRecategorize; k++ {
		d.Kinds = append(d.Kinds, k.String())
	}
	for cat := range memory.NumCategories {
		d.Cats = append(d.Cats, cat.String())
		d.Colors = append(d.Colors, categoryColors[cat])
	}
	for _, cat := range c.cats {
		d.Order = append(d.Order, int(cat))
	}
	siteIndex := map[string]int64{}
	for _, s := range c.samples {
		p := tl.Points[s.index]
		row := make([]int64, hoverFixed+int(memory.NumCategories))
		row[0], row[1], row[2], row[3] = int64(s.from), int64(s.to), int64(s.index), p.Reserved
		row[4], row[6], row[7], row[9] = -1, 0, -1, -1
		row[8] = tl.stepAt(s.index)
		if s.index > 0 {
			e := tl.Events[s.index-1]
			row[4], row[5], row[6] = int64(e.Kind), e.Size, int64(e.Category)
			if e.Site != "" {
				i, ok := siteIndex[e.Site]
				if !ok {
					i = int64(len(d.Sites))
					siteIndex[e.Site] = i
					d.Sites = append(d.Sites, e.Site)
				}
				row[7] = i
			}
			row[9] = e.Time.Sub(tl.Events[0].Time).Microseconds()
		}
		copy(row[hoverFixed:], p.ByCategory[:])
		d.S = append(d.S, row)
	}
	return d
}

const pageStyle = `body{margin:0;font-family:Helvetica,Arial,sans-serif;color:#222;background:#fff}
#chart{position:relative;width:1200px;max-width:100%}
#chart svg{display:block;max-width:100%;height:auto}
#tip{position:absolute;pointer-events:none;background:#fff;border:1px solid #888;border-radius:3px;padding:6px 8px;font-size:12px;line-height:1.45;box-shadow:0 2px 6px rgba(0,0,0,.2);max-width:460px;white-space:nowrap}
.sw{display:inline-block;width:10px;height:10px;margin-right:5px;vertical-align:-1px}
section{margin:8px 24px 24px 24px}
h2{font-size:16px;margin:18px 0 6px 0}
pre{font-size:12px;line-height:1.3;margin:0}`

// pageScript shows the state of the allocator under the mouse.
const pageScript = `(function(){
var D=JSON.parse(document.getElementById('memdata').textContent);
var svg=document.getElementById('timeline'),hit=document.getElementById('hit'),cur=document.getElementById('cursor'),tip=document.getElementById('tip'),box=document.getElementById('chart');
var U=['KiB','MiB','GiB','TiB','PiB'];
function fmt(n){if(n<1024)return n+' B';var v=n/1024,i=0;while(v>=1023.995&&i<U.length-1){v/=1024;i++}return v.toFixed(2)+' '+U[i]}
function esc(s){return s.replace(/[&<>"]/g,function(c){return{'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]})}
function find(i){var lo=0,hi=D.s.length-1;while(lo<hi){var m=(lo+hi+1)>>1;if(D.s[m][0]<=i)lo=m;else hi=m-1}return D.s[lo]}
hit.addEventListener('mousemove',function(ev){
var pt=svg.createSVGPoint();pt.x=ev.clientX;pt.y=ev.clientY;
var p=pt.matrixTransform(svg.getScreenCTM().inverse());
var i=Math.max(0,Math.min(D.n-1,Math.floor((p.x-D.left)/(D.right-D.left)*D.n)));
var s=find(i),x=D.left+(D.right-D.left)*(s[2]+0.5)/D.n;
cur.setAttribute('x1',x);cur.setAttribute('x2',x);cur.setAttribute('visibility','visible');
var h='<b>event '+s[2]+'</b> &middot; step '+s[8]+(s[9]>=0?' &middot; +'+(s[9]/1e6).toFixed(3)+' s':'')+'<br>';
if(s[4]>=0){h+=D.kinds[s[4]]+' '+fmt(s[5])+' '+D.cats[s[6]]+(s[7]>=0?' at '+esc(D.sites[s[7]]):'')+'<br>'}else{h+='before the first recorded event<br>'}
var tot=0,rows=[];
for(var k=D.order.length-1;k>=0;k--){var c=D.order[k],v=s[10+c];tot+=v;if(v>0)rows.push('<span class="sw" style="background:'+D.colors[c]+'"></span>'+D.cats[c]+' '+fmt(v))}
h+='allocated <b>'+fmt(tot)+'</b>, reserved '+fmt(s[3])+(rows.length?'<br>'+rows.join('<br>'):'');
if(s[1]-s[0]>1)h+='<br><i>'+(s[1]-s[0])+' events here; showing the one with most allocated</i>';
tip.innerHTML=h;tip.hidden=false;
var r=box.getBoundingClientRect(),tx=ev.clientX-r.left+14,ty=ev.clientY-r.top+14;
if(tx+tip.offsetWidth>r.width)tx=ev.clientX-r.left-14-tip.offsetWidth;
if(ty+tip.offsetHeight>r.height)ty=Math.max(0,ev.clientY-r.top-14-tip.offsetHeight);
tip.style.left=tx+'px';tip.style.top=ty+'px';
});
hit.addEventListener('mouseleave',function(){tip.hidden=true;cur.setAttribute('visibility','hidden')});
})();`

// writeHTML writes one self-contained page: the chart with hover details,
// the timeline in words, the segment map and the summary. It loads nothing
// from the network.
func writeHTML(w io.Writer, s memory.Snapshot, tl *Timeline) error {
	c := newChart(tl, true)
	data, err := json.Marshal(c.hoverData())
	if err != nil {
		return err
	}
	var words strings.Builder
	timelineText(&words, tl)
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	fmt.Fprintf(&b, "<title>memfit memory report: %s</title>\n", html.EscapeString(s.Device))
	b.WriteString("<style>\n" + pageStyle + "\n</style>\n</head>\n<body>\n")
	b.WriteString("<div id=\"chart\">\n")
	b.WriteString(c.svg())
	b.WriteString("<div id=\"tip\" hidden></div>\n</div>\n")
	for _, sec := range []struct{ title, body string }{
		{"Timeline", words.String()},
		{"Segments", s.SegmentMap()},
		{"Summary", s.Summary()},
	} {
		fmt.Fprintf(&b, "<section>\n<h2>%s</h2>\n<pre>%s</pre>\n</section>\n", sec.title, html.EscapeString(sec.body))
	}
	// json.Marshal escapes <, > and &, so the data cannot close the script.
	fmt.Fprintf(&b, "<script type=\"application/json\" id=\"memdata\">%s</script>\n", data)
	b.WriteString("<script>\n" + pageScript + "\n</script>\n</body>\n</html>\n")
	_, err = io.WriteString(w, b.String())
	return err
}
