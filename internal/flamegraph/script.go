package flamegraph

// script makes the graph interactive: click a frame to zoom (its ancestors
// stay, dimmed; Reset Zoom or Escape goes back), Search (or Ctrl-F) takes a
// regular expression, paints matching frames and prints their share of the
// zoomed view without double counting nested matches, and hovering shows a
// frame's details. "?s=regex" in the URL searches on load and "?z=regex"
// zooms into the first matching frame (also after "#"), so a link can point
// at a function. Plain ES5 and DOM: no libraries.
const script = `(function () {
  var svg = document.querySelector('svg');
  var W = +svg.getAttribute('data-width'), PAD = +svg.getAttribute('data-pad');
  var TOTAL = +svg.getAttribute('data-total'), UNIT = svg.getAttribute('data-unit');
  var CW = 0.59 * 12;
  var frames = Array.prototype.slice.call(svg.querySelectorAll('g.f'));
  function byId(id) { return svg.querySelector('#' + id); }
  var details = byId('details');
  var info = frames.map(function (g) {
    var r = g.querySelector('rect');
    return { g: g, x: +g.getAttribute('data-x'), w: +g.getAttribute('data-w'), d: +g.getAttribute('data-d'),
      name: g.getAttribute('data-n'), rect: r, text: g.querySelector('text'), fill: r.getAttribute('fill') };
  });
  var zoomed = null, term = null;
  function fit(name, width) {
    var n = Math.floor((width - 6) / CW);
    if (n < 3) return '';
    return name.length <= n ? name : name.slice(0, n - 2) + '..';
  }
  function place(f, px, pw) {
    f.rect.setAttribute('x', px.toFixed(2));
    f.rect.setAttribute('width', pw.toFixed(2));
    f.text.setAttribute('x', (px + 3).toFixed(2));
    f.text.textContent = fit(f.name, pw);
  }
  var EPS = 1e-9;
  function zoom(z) {
    zoomed = z;
    var sc = (W - 2 * PAD) / z.w;
    info.forEach(function (f) {
      var inside = f.d >= z.d && f.x >= z.x - EPS * z.w && f.x + f.w <= z.x + z.w + EPS * z.w;
      var anc = f.d < z.d && f.x <= z.x + EPS * z.w && f.x + f.w >= z.x + z.w - EPS * z.w;
      f.g.classList.toggle('hid', !(inside || anc));
      f.g.classList.toggle('anc', anc);
      if (inside) place(f, PAD + (f.x - z.x) * sc, f.w * sc);
      else if (anc) place(f, PAD, W - 2 * PAD);
    });
    byId('unzoom').classList.remove('hid');
    if (term) search(term);
  }
  function unzoom() {
    zoomed = null;
    var sc = (W - 2 * PAD) / TOTAL;
    info.forEach(function (f) {
      f.g.classList.remove('hid', 'anc');
      place(f, PAD + f.x * sc, f.w * sc);
    });
    byId('unzoom').classList.add('hid');
    if (term) search(term);
  }
  function search(t) {
    var re;
    try { re = new RegExp(t); } catch (e) { byId('matched').textContent = 'bad regular expression'; return; }
    term = t;
    var spans = [];
    info.forEach(function (f) {
      var hit = re.test(f.name);
      f.rect.setAttribute('fill', hit ? 'rgb(230,0,230)' : f.fill);
      if (hit && !f.g.classList.contains('hid') && !f.g.classList.contains('anc')) spans.push([f.x, f.x + f.w]);
    });
    // Nested matches (a recursive function) cover the same samples: merge.
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var sum = 0, end = -Infinity;
    spans.forEach(function (s) {
      if (s[0] >= end) { sum += s[1] - s[0]; end = s[1]; }
      else if (s[1] > end) { sum += s[1] - end; end = s[1]; }
    });
    var whole = zoomed ? zoomed.w : TOTAL;
    byId('matched').textContent = 'Matched: ' + (100 * sum / whole).toFixed(1) + '% (' + spans.length + ' frames)';
    byId('search').textContent = 'Clear Search';
  }
  function clearSearch() {
    term = null;
    info.forEach(function (f) { f.rect.setAttribute('fill', f.fill); });
    byId('matched').textContent = '';
    byId('search').textContent = 'Search';
  }
  function askSearch() {
    var t = window.prompt('Search for (regular expression):', term || '');
    if (t) search(t); else if (t === '') clearSearch();
  }
  var index = new Map();
  info.forEach(function (f) { index.set(f.g, f); });
  svg.addEventListener('click', function (e) {
    var g = e.target.closest ? e.target.closest('g.f') : null;
    if (g) { zoom(index.get(g)); return; }
    if (e.target === byId('unzoom')) unzoom();
    if (e.target === byId('search')) { if (term) clearSearch(); else askSearch(); }
  });
  svg.addEventListener('mouseover', function (e) {
    var g = e.target.closest ? e.target.closest('g.f') : null;
    if (g) details.textContent = g.querySelector('title').textContent;
  });
  window.addEventListener('keydown', function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === 'f') { e.preventDefault(); askSearch(); }
    if (e.key === 'Escape') { if (zoomed) unzoom(); else clearSearch(); }
  });
  var loc = window.location.search + window.location.hash;
  var z = /[?#&]z=([^&]*)/.exec(loc);
  if (z) {
    var zre = new RegExp(decodeURIComponent(z[1]));
    for (var i = 0; i < info.length; i++) if (zre.test(info[i].name)) { zoom(info[i]); break; }
  }
  var m = /[?#&]s=([^&]*)/.exec(loc);
  if (m) search(decodeURIComponent(m[1]));
  svg.setAttribute('data-ready', 'true');
})();`
