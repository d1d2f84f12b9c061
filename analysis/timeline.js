// The timeline's level-of-detail view in the browser: redraws the figure from the embedded
// interval store on every zoom or pan, as analysis/timeline.py's _view does in Python.
(function () {
  if (window.ggmlTraceTimeline) return;
  const reg = {};
  window.ggmlTraceTimelines = reg;
  function b64(s) {
    const bin = atob(s), out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  const CTOR = {'<f8': Float64Array, '<f4': Float32Array, '<i4': Int32Array, '<i2': Int16Array,
                '<u1': Uint8Array};
  async function column(c) {
    const z = b64(c.data);
    const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream('deflate'));
    const buf = await new Response(stream).arrayBuffer();
    return new CTOR[c.dtype](buf);
  }
  function us(ns) {
    return (ns / 1e3).toLocaleString('en-US', {minimumFractionDigits: 3, maximumFractionDigits: 3}) + ' µs';
  }
  const ENT = {'&lt;': '<', '&gt;': '>', '&amp;': '&', '&#34;': '"', '&#39;': "'"};
  function unescape(t) {  // bar labels are WebGL text (no HTML): back to the raw name
    return t.replace(/&lt;|&gt;|&amp;|&#34;|&#39;/g, function (m) { return ENT[m]; });
  }
  function num(x) { return Math.round(x).toLocaleString('en-US'); }
  function fmtBytes(b) {
    b = Math.max(b, 0);
    const u = Math.min(Math.floor(Math.log2(Math.max(b, 1)) / 10), 3), v = b / Math.pow(1024, u);
    return (u ? v.toFixed(1) : String(Math.round(v))) + [' B', ' KiB', ' MiB', ' GiB'][u];
  }
  async function load(id) {
    const el = document.getElementById(id + '-data');
    const s = JSON.parse(el.textContent);
    const c = {};
    for (const k of Object.keys(s.cols)) c[k] = await column(s.cols[k]);
    const a = {};
    for (const k of ['t0', 't1', 'r0', 'r1', 'type']) a[k] = await column(s.arrows[k]);
    s.c = c; s.a = a;
    return s;
  }
  function hoverText(s, i) {
    const c = s.c, k = s.kinds[c.kind[i]] || '';
    let t = '<b>' + k + '</b> ' + (c.backend[i] >= 0 ? s.backends[c.backend[i]] : '') +
            (c.device[i] ? ' · on the device' : '');
    t += '<br>' + (c.graph[i] >= 0 ? 'graph ' + c.graph[i] : '') + (c.split[i] >= 0 ? ' · split ' + c.split[i] : '');
    if (k === 'graph_compute') t += ' · ' + num(c.arg[i]) + ' nodes · ' + Math.max(c.inputs ? c.inputs[i] : 0, 0) + ' input copies';
    const st = c.src_t ? c.src_t[i] : -1, dt = c.dst_t ? c.dst_t[i] : -1;
    const sb = c.src_buf ? c.src_buf[i] : -1, db = c.dst_buf ? c.dst_buf[i] : -1;
    if (st >= 0 || dt >= 0 || sb >= 0 || db >= 0) {
      const n = c.arg[i], so = c.src_off[i], d0 = c.dst_off[i];
      t += '<br>' + num(n) + ' bytes: ' + (st >= 0 ? s.tensors[st] : '(host memory)') + ' → ' +
           (dt >= 0 ? s.tensors[dt] : '(host memory)');
      t += '<br>src ' + (sb >= 0 ? s.buffers[sb] : '') + ' [' + so + ', ' + (so + n) + ')';
      t += '<br>dst ' + (db >= 0 ? s.buffers[db] : '') + ' [' + d0 + ', ' + (d0 + n) + ')';
    }
    const nr = c.n_r ? c.n_r[i] : 0, nw = c.n_w ? c.n_w[i] : 0;
    if (!(st >= 0 || dt >= 0 || sb >= 0 || db >= 0) && nr + nw > 0) {
      const lw = c.last_w ? c.last_w[i] : -1;
      t += '<br>' + nr + ' reads (' + fmtBytes(c.b_r[i]) + ') · ' + nw + ' writes (' +
           fmtBytes(c.b_w[i]) + ')' + (lw >= 0 ? ' → ' + s.tensors[lw] : '');
    }
    if (c.event && c.event[i] >= 0) t += '<br>event 0x' + c.event[i].toString(16);
    if (c.mark && c.mark[i] >= 0) t += '<br>' + s.marks[c.mark[i]];
    t += (c.device[i] ? '<br>enqueued by ' : '<br>') + (c.thread[i] >= 0 ? s.threads[c.thread[i]] : '');
    const t0 = c.t0[i], t1 = t0 + c.dur[i];
    t += '<br>' + us(t0) + ' → ' + us(t1) + ' (' + us(c.dur[i]) + ')';
    return t;
  }
  function barLabel(s, i) {
    const c = s.c, k = s.kinds[c.kind[i]] || '';
    if (c.rtype[i] === s.rowTypes.copies) {
      const tt = c.dst_t && c.dst_t[i] >= 0 ? c.dst_t[i] : (c.src_t ? c.src_t[i] : -1);
      return (tt >= 0 ? s.tensors[tt] : '') + ' · ' + num(c.arg[i]) + ' B';
    }
    if (k === 'graph_compute' && c.split[i] >= 0) return 'split ' + c.split[i] + ' · ' + num(c.arg[i]) + ' nodes';
    if (c.rtype[i] === s.rowTypes.kernels && c.mark && c.mark[i] >= 0) return unescape(s.marks[c.mark[i]]);
    return k;
  }
  function lowerBound(a, lo, hi, x) {
    while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  function view(s, x0, x1, widthPx) {
    const cfg = s.config, c = s.c, nRows = s.rows.length, nCls = s.classes.length;
    const span = Math.max(x1 - x0, 1), px = span / widthPx;
    const segs = []; for (let k = 0; k < nCls; k++) segs.push({x: [], y: []});
    const hx = [], hy = [], ht = [], lx = [], ly = [], lt = [];
    const exactRow = new Uint8Array(nRows);
    let exact = 0, aggRows = 0;
    for (let r = 0; r < nRows; r++) {
      const a = s.rowStart[r], b = s.rowStart[r + 1];
      if (a === b) { exactRow[r] = 1; continue; }
      const lo = lowerBound(c.t0, a, b, x0 - s.rowMaxDur[r] - 1);
      const hi = lowerBound(c.t0, lo, b, x1 + 1);
      const vis = [];
      for (let i = lo; i < hi; i++) if (c.t0[i] + c.dur[i] >= x0) vis.push(i);
      if (vis.length <= cfg.rowDetail) {
        exactRow[r] = 1;
        for (const i of vis) {
          const b0 = c.t0[i], e0 = Math.max(b0 + c.dur[i], b0 + px);
          const sg = segs[c.cls[i]];
          sg.x.push(b0 / 1e9, e0 / 1e9, NaN); sg.y.push(r, r, NaN);
          const cb = Math.max(b0, x0), ce = Math.min(e0, x1);
          const np = Math.min(Math.max(Math.ceil((ce - cb) / (cfg.hoverPx * px)), 1), 200);
          const txt = hoverText(s, i);
          for (let j = 0; j < np; j++) { hx.push((cb + (ce - cb) * (j + 0.5) / np) / 1e9); hy.push(r); ht.push(txt); }
          if (ce - cb >= cfg.labelMinPx * px && lt.length < cfg.labelLimit) {
            let l = unescape(barLabel(s, i)); const m = Math.max(Math.floor((ce - cb) / px / 6.0) - 1, 1);
            if (l.length > m) l = l.slice(0, Math.max(m - 1, 1)) + '…';
            lx.push((cb + ce) / 2e9); ly.push(r); lt.push(l);
          }
        }
        exact += vis.length;
      } else {
        aggRows++;
        const nb = cfg.bins, w = span / nb;
        const busy = new Float64Array(nCls * nb), cnt = new Float64Array(nb);
        for (const i of vis) {
          const s0 = (Math.min(Math.max(c.t0[i], x0), x1) - x0) / w;
          const e0 = (Math.min(Math.max(c.t0[i] + c.dur[i], x0), x1) - x0) / w;
          const k = c.cls[i];
          let f = Math.min(Math.floor(s0), nb - 1), l = Math.min(Math.floor(e0), nb - 1);
          for (let q = f; q <= l; q++) {
            const ov = Math.min(e0, q + 1) - Math.max(s0, q);
            if (ov > 0) busy[k * nb + q] += ov;
            cnt[q] += 1;
          }
        }
        let q = 0;
        const dom = new Int32Array(nb).fill(-1);
        for (q = 0; q < nb; q++) {
          if (cnt[q] <= 0) continue;
          let best = 0, bv = -1;
          for (let k = 0; k < nCls; k++) if (busy[k * nb + q] > bv) { bv = busy[k * nb + q]; best = k; }
          dom[q] = best;
        }
        q = 0;
        while (q < nb) {
          if (dom[q] < 0) { q++; continue; }
          let e = q, n = 0, bsum = 0;
          while (e < nb && dom[e] === dom[q]) {
            n += cnt[e];
            for (let k = 0; k < nCls; k++) bsum += busy[k * nb + e];
            e++;
          }
          const rb = x0 + q * w, re = x0 + e * w;
          const sg = segs[dom[q]];
          sg.x.push(rb / 1e9, re / 1e9, NaN); sg.y.push(r, r, NaN);
          const txt = '<b>' + s.rows[r] + '</b><br>' + Math.round(100 * Math.min(bsum / (e - q), 1)) +
            '% busy · mostly ' + s.classes[dom[q]] + '<br>' + us(rb) + ' → ' + us(re) + '<br>about ' +
            num(n) + ' interval-bins (zoom in for each interval)';
          const np = Math.min(Math.max(Math.ceil((re - rb) / (cfg.hoverPx * px)), 1), 200);
          for (let j = 0; j < np; j++) { hx.push((rb + (re - rb) * (j + 0.5) / np) / 1e9); hy.push(r); ht.push(txt); }
          q = e;
        }
      }
    }
    const arrows = [{x: [], y: [], hx: [], hy: [], sym: []}, {x: [], y: [], hx: [], hy: [], sym: []}];
    let inView = [];
    const A = s.a;
    for (let i = 0; i < s.arrows.n; i++) {
      const lo = Math.min(A.t0[i], A.t1[i]), hi = Math.max(A.t0[i], A.t1[i]);
      if (hi >= x0 && lo <= x1 && exactRow[A.r0[i]] && exactRow[A.r1[i]]) inView.push(i);
    }
    const hidden = inView.length > cfg.arrowLimit ? inView.length : 0;
    if (hidden) inView = [];
    for (const i of inView) {
      const g = arrows[A.type[i]];
      g.x.push(A.t0[i] / 1e9, A.t1[i] / 1e9, NaN); g.y.push(A.r0[i], A.r1[i], NaN);
      const d = Math.sign(A.r1[i] - A.r0[i]);
      g.hx.push(A.t1[i] / 1e9); g.hy.push(A.r1[i] - d * 0.3);
      g.sym.push(A.r1[i] >= A.r0[i] ? 'triangle-down' : 'triangle-up');
    }
    return {segs, hx, hy, ht, lx, ly, lt, arrows, hidden, exact, aggRows};
  }
  function redraw(st) {
    const gd = st.gd, s = st.s, xa = gd._fullLayout.xaxis;
    const x0 = xa.range[0] * 1e9, x1 = xa.range[1] * 1e9;
    const key = x0 + ':' + x1 + ':' + xa._length;
    if (key === st.key) return;
    st.key = key;
    const v = view(s, x0, x1, Math.max(xa._length, 100));
    const data = gd.data.map(function (t) {
      const m = String(t.meta || '');
      const o = Object.assign({}, t);
      if (m.startsWith('bars:')) { const g = v.segs[+m.slice(5)]; o.x = g.x; o.y = g.y; }
      else if (m.startsWith('arrows:')) { const g = v.arrows[+m.slice(7)]; o.x = g.x; o.y = g.y; }
      else if (m.startsWith('heads:')) {
        const g = v.arrows[+m.slice(6)]; o.x = g.hx; o.y = g.hy;
        o.marker = Object.assign({}, t.marker, {symbol: g.sym});
      }
      else if (m === 'hover') { o.x = v.hx; o.y = v.hy; o.hovertext = v.ht; }
      else if (m === 'labels') { o.x = v.lx; o.y = v.ly; o.text = v.lt; }
      return o;
    });
    st.drawn = v;
    gd.dataset.exactInView = v.exact;
    gd.dataset.aggregatedRows = v.aggRows;
    const note = [];
    if (v.aggRows) note.push(v.aggRows + ' busy rows aggregated: zoom in for each interval');
    if (v.hidden) note.push(num(v.hidden) + ' arrows hidden: zoom in');
    const title = Object.assign({}, gd.layout.title, {
      text: s.title + (note.length ? '<br><sup>' + note.join(' · ') + '</sup>' : '')});
    return Plotly.react(gd, data, Object.assign({}, gd.layout, {title: title})).then(function () {
      st.lastRedraw = performance.now();
    });
  }
  window.ggmlTraceTimeline = function (id) {
    const gd = document.getElementById(id);
    const st = {gd: gd, s: null, key: null, timer: null};
    reg[id] = st;
    st.ready = load(id).then(function (s) {
      st.s = s;
      gd.dataset.intervals = s.n;
      gd.dataset.rows = s.rows.length;
      gd.on('plotly_relayout', function () {
        clearTimeout(st.timer);
        st.timer = setTimeout(function () { redraw(st); }, 60);
      });
      const xa = gd._fullLayout.xaxis;
      st.key = xa.range[0] * 1e9 + ':' + xa.range[1] * 1e9 + ':' + xa._length;
      gd.dataset.ready = '1';
      return st;
    }).catch(function (e) { console.error('ggml-trace timeline: ' + e); throw e; });
  };
})();
