"""The report's own script: draws the interactive views with Plotly (embedded, never fetched) from
the numbers the page carries in ``<script id="neurcam-data" type="application/json">``.

One cluster selector drives the page: the chosen cluster's section is shown, its curve is drawn
in its colour over the others' in grey, with the range over the compared runs around it (when a
search compared several) and dotted where the feature has few rows; a pair's heat map is the
chosen cluster's; a categorical term is one group of bars per level (its rows counted), the chosen
cluster's in its colour and the others grey, "missing" a bar of its own; a numeric term's value for
a missing cell is a marked point right of its curve. A term selector picks the shape graph and the
heat map. Hovering shows values.
"""

SCRIPT = r"""
(function () {
  const D = JSON.parse(document.getElementById('neurcam-data').textContent);
  const GREY = '#c4c4c4';
  const CONFIG = {displaylogo: false, responsive: true};
  const select = document.getElementById('choose-cluster');
  let current = D.initial;

  function colour(k) { return current < 0 || current === k ? D.colours[k] : GREY; }
  function rgba(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return 'rgba(' + (n >> 16) + ',' + ((n >> 8) & 255) + ',' + (n & 255) + ',' + a + ')';
  }
  function column(rows, k) { return rows.map(function (r) { return r[k]; }); }
  function name(k) { return 'cluster ' + D.ids[k]; }

  function mainFigure(t) {
    const traces = [];
    const order = D.ids.map(function (_, k) { return k; }).filter(function (k) { return k !== current; });
    if (current >= 0) order.push(current);
    if (current >= 0 && t.band) {
      traces.push({x: t.grid, y: column(t.band.high, current), mode: 'lines', line: {width: 0},
                   showlegend: false, hoverinfo: 'skip'});
      traces.push({x: t.grid, y: column(t.band.low, current), mode: 'lines', line: {width: 0}, fill: 'tonexty',
                   fillcolor: rgba(D.colours[current], 0.22), name: 'range over ' + D.runs + ' runs',
                   hoverinfo: 'skip'});
    }
    const shape = t.discrete ? 'hvh' : 'linear';
    order.forEach(function (k) {
      const y = column(t.values, k);
      const chosen = current === k;
      traces.push({x: t.grid, y: y.map(function (v, i) { return t.sparse[i] ? null : v; }), mode: 'lines',
                   name: name(k), legendgroup: 'c' + k, connectgaps: false,
                   line: {color: colour(k), width: chosen ? 3 : (current < 0 ? 1.6 : 1), shape: shape},
                   hovertemplate: t.feature + ' %{x:.4~r}: %{y:.3~r}<extra>' + name(k) + '</extra>'});
      traces.push({x: t.grid, y: y, mode: 'lines', legendgroup: 'c' + k, showlegend: false, opacity: 0.55,
                   line: {color: colour(k), width: 1, dash: 'dot', shape: shape},
                   hovertemplate: t.feature + ' %{x:.4~r}: %{y:.3~r} (few rows)<extra>' + name(k) + '</extra>'});
    });
    if (t.missing) {
      order.forEach(function (k) {
        traces.push({x: [t.missing.x], y: [t.missing.values[k]], mode: 'markers', legendgroup: 'c' + k,
                     showlegend: false, marker: {symbol: 'diamond', size: current === k ? 11 : 7, color: colour(k)},
                     hovertemplate: 'missing (' + t.missing.rows + ' rows): %{y:.3~r}<extra>' + name(k) + '</extra>'});
      });
    }
    traces.push({type: 'bar', x: t.hist.centres, y: t.hist.counts, width: t.hist.widths, yaxis: 'y2',
                 marker: {color: '#b8b8b8'}, name: 'rows', showlegend: false,
                 hovertemplate: '%{y} rows near %{x:.4~r}<extra></extra>'});
    const layout = {title: {text: t.name + (current >= 0 ? ': cluster ' + D.ids[current] : ''), font: {size: 15}},
                    height: 470, margin: {t: 48, r: 10, b: 48, l: 64}, hovermode: 'closest',
                    yaxis: {domain: [0.3, 1], title: {text: 'logit contribution'}, zeroline: true},
                    yaxis2: {domain: [0, 0.2], title: {text: 'rows'}},
                    xaxis: {title: {text: t.feature}, anchor: 'y2'}, legend: {font: {size: 11}}};
    return [traces, layout];
  }

  function levelFigure(t) {
    const order = D.ids.map(function (_, k) { return k; });
    const traces = order.map(function (k) {
      return {type: 'bar', x: t.levels, y: column(t.values, k), name: name(k), marker: {color: colour(k)},
              hovertemplate: t.feature + ' = %{x}: %{y:.3~r}<extra>' + name(k) + '</extra>'};
    });
    traces.push({type: 'bar', x: t.levels, y: t.counts, yaxis: 'y2', marker: {color: '#b8b8b8'}, name: 'rows',
                 showlegend: false, hovertemplate: '%{x}: %{y} rows<extra></extra>'});
    const layout = {title: {text: t.name + (current >= 0 ? ': cluster ' + D.ids[current] : ''), font: {size: 15}},
                    height: 470, margin: {t: 48, r: 10, b: 90, l: 64}, barmode: 'group', hovermode: 'closest',
                    yaxis: {domain: [0.3, 1], title: {text: 'logit contribution'}, zeroline: true},
                    yaxis2: {domain: [0, 0.2], title: {text: 'rows'}},
                    xaxis: {title: {text: t.feature}, anchor: 'y2', type: 'category'}, legend: {font: {size: 11}}};
    return [traces, layout];
  }

  function pairFigure(t) {
    const k = current < 0 ? 0 : current;
    const z = t.values.map(function (row) { return row.map(function (cell) { return cell[k]; }); });
    const traces = [{type: 'heatmap', x: t.grids[1], y: t.grids[0], z: z, zmin: -t.lim, zmax: t.lim,
                     colorscale: 'RdBu', colorbar: {title: {text: 'logit<br>contribution'}},
                     hovertemplate: t.features[1] + ' %{x:.4~r}, ' + t.features[0] + ' %{y:.4~r}: %{z:.3~r}<extra></extra>'}];
    const layout = {title: {text: t.name + ': cluster ' + D.ids[k] + (current < 0 ? ' (choose a cluster above)' : ''),
                            font: {size: 15}},
                    height: 470, margin: {t: 48, r: 10, b: 48, l: 64},
                    xaxis: {title: {text: t.features[1]}}, yaxis: {title: {text: t.features[0]}}};
    [['xaxis', 1], ['yaxis', 0]].forEach(function (a) {   // a categorical axis: its level names
      if (t.ticks && t.ticks[a[1]]) { layout[a[0]].tickvals = t.grids[a[1]]; layout[a[0]].ticktext = t.ticks[a[1]]; }
    });
    return [traces, layout];
  }

  function drawTerms() {
    document.querySelectorAll('.term-view').forEach(function (view) {
      const chooser = view.querySelector('select');
      const t = D.terms[Number(chooser.value)];
      const fig = t.kind === 'main' ? mainFigure(t) : (t.kind === 'levels' ? levelFigure(t) : pairFigure(t));
      Plotly.react(view.querySelector('.plot'), fig[0], fig[1], CONFIG);
    });
  }

  function drawRows() {
    document.querySelectorAll('.row-bars').forEach(function (div) {
      const r = D.rows[Number(div.dataset.row)];
      const terms = r.terms.slice().reverse();
      const label = function (q) {
        const v = q.term.split(' & ').filter(function (f) { return f in r.values; })
          .map(function (f) {
            const v = r.values[f];
            return f + ' = ' + (v === null ? 'missing' : (typeof v === 'string' ? v : Number(v.toPrecision(4))));
          });
        return v.length ? v.join(', ') : q.term;
      };
      Plotly.newPlot(div, [{type: 'bar', orientation: 'h', y: terms.map(label),
                            x: terms.map(function (q) { return q.push; }),
                            marker: {color: terms.map(function (q) { return q.push > 0 ? '#2b7bba' : '#d7642c'; })},
                            hovertemplate: '%{y}: %{x:.3~r}<extra></extra>'}],
                     {height: 60 + 24 * terms.length, margin: {t: 10, r: 10, b: 40}, yaxis: {automargin: true},
                      xaxis: {title: {text: 'push toward cluster ' + r.cluster + ' (logit contribution)'}}}, CONFIG);
    });
  }

  function showSections() {
    document.querySelectorAll('section.cluster').forEach(function (s) {
      s.hidden = current >= 0 && Number(s.dataset.index) !== current;
    });
    const note = document.getElementById('showing');
    if (note) note.textContent = current < 0 ? 'every cluster' : name(current);
  }

  function choose(value) {
    current = Number(value);
    select.value = String(current);
    showSections();
    drawTerms();
  }

  select.addEventListener('change', function () { choose(select.value); });
  document.querySelectorAll('.term-view select').forEach(function (s) { s.addEventListener('change', drawTerms); });
  function follow() {   // a link to a cluster's section chooses that cluster
    const m = /^#cluster-(-?\d+)$/.exec(window.location.hash);
    if (m) {
      const k = D.ids.indexOf(Number(m[1]));
      if (k >= 0) { choose(k); document.getElementById('cluster-' + m[1]).scrollIntoView(); }
    }
  }
  window.addEventListener('hashchange', follow);
  select.value = String(current);
  showSections();
  drawTerms();
  drawRows();
  follow();
})();
"""
