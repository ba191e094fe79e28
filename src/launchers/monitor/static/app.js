/* launchers monitor: the page. Plain JavaScript, no build step, no library.
 *
 * Everything taken from job directories (names, reasons, log lines, parameters) is put in the
 * page with textContent or drawn on a canvas: never parsed as HTML. */
(function () {
  "use strict";

  const TOKEN = document.querySelector('meta[name="launchers-token"]').content;
  const STATES = ["WAITING", "SUBMITTING", "PENDING", "RUNNING", "SUSPENDED", "COMPLETED",
    "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
    "DEADLINE", "UNRUNNABLE", "LOST", "UNREADABLE"];
  const NEVER_RAN = new Set(["WAITING", "SUBMITTING", "PENDING"]);
  const UNFINISHED = new Set(["WAITING", "SUBMITTING", "PENDING", "RUNNING", "SUSPENDED"]);
  const LOG_KEEP = 512 * 1024;

  // ---------------------------------------------------------------- small helpers
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") node.className = v;
        else if (k === "text") node.textContent = v;
        else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
        else if (k === "dataset") Object.assign(node.dataset, v);
        else node.setAttribute(k, v === true ? "" : String(v));
      }
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const $ = (id) => document.getElementById(id);
  // replaceChildren, leaving out the parts not shown (null, undefined, false)
  function put(node, ...children) {
    node.replaceChildren(...children.filter((c) => c !== null && c !== undefined && c !== false));
    return node;
  }
  const nf = new Intl.NumberFormat("en-US");
  const num = (n) => nf.format(n);
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const stateColor = (s) => css("--st-" + s) || "#888";

  // a path that may wrap after each "/" only (<wbr>), never inside a name
  function pathNode(cls, path) {
    const node = el("div", { class: cls });
    String(path).split("/").forEach((part, i) => {
      if (i) node.append("/", el("wbr"));
      node.append(part);
    });
    return node;
  }

  function chip(state) {
    return el("span", { class: "chip " + state, dataset: { st: state } }, state.replace(/_/g, " "));
  }

  function fmtDuration(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return "–";
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return sec + " s";
    const m = Math.floor(sec / 60), s = sec % 60;
    if (sec < 600) return m + " min " + (s ? s + " s" : "");
    if (sec < 3600) return m + " min";
    const h = Math.floor(sec / 3600), mm = Math.floor((sec % 3600) / 60);
    if (sec < 86400) return h + " h " + String(mm).padStart(2, "0") + " min";
    const d = Math.floor(sec / 86400), hh = Math.floor((sec % 86400) / 3600);
    return d + " d " + hh + " h";
  }
  function fmtHours(sec) {
    if (!sec) return "0 s";
    if (sec < 3600) return fmtDuration(sec);
    return (sec / 3600).toFixed(sec < 36000 ? 1 : 0) + " h";
  }
  const pad2 = (n) => String(n).padStart(2, "0");
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  function fmtTime(t) {
    if (t === null || t === undefined) return "–";
    const d = new Date(t * 1000), now = new Date();
    const hms = pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds());
    if (d.toDateString() === now.toDateString()) return hms;
    const day = MONTHS[d.getMonth()] + " " + d.getDate();
    if (d.getFullYear() === now.getFullYear()) return day + " " + hms.slice(0, 5);
    return d.getFullYear() + " " + day;
  }
  function fmtFull(t) {
    if (t === null || t === undefined) return "";
    const d = new Date(t * 1000);
    return d.getFullYear() + "-" + pad2(d.getMonth() + 1) + "-" + pad2(d.getDate()) + " " +
      pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds());
  }
  function fmtAgo(t) {
    if (t === null || t === undefined) return "–";
    const s = Math.max(0, nowSec() - t);
    if (s < 5) return "just now";
    if (s < 60) return Math.round(s) + " s ago";
    return fmtDuration(s).replace(/ \d+ s$/, "") + " ago";
  }
  function fmtBytes(n) {
    if (n === null || n === undefined) return "";
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }
  // the server's clock: durations of running jobs count from the server's "now"
  let clockSkew = 0;
  const nowSec = () => Date.now() / 1000 - clockSkew;

  function toast(message, isError) {
    const t = $("toast");
    t.textContent = message;
    t.className = "toast" + (isError ? " error" : "");
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 4000);
  }

  async function api(path, options) {
    const opts = Object.assign({ headers: {} }, options || {});
    opts.headers["X-Launchers-Token"] = TOKEN;
    const res = await fetch(path, opts);
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
    return body;
  }

  function confirmDialog(text, yesLabel) {
    return new Promise((resolve) => {
      const d = $("confirm");
      $("confirm-text").textContent = text;
      $("confirm-yes").textContent = yesLabel;
      const done = (v) => { d.close(); resolve(v); };
      $("confirm-yes").onclick = () => done(true);
      $("confirm-no").onclick = () => done(false);
      d.oncancel = () => resolve(false);
      d.showModal();
    });
  }

  // ---------------------------------------------------------------- data
  const store = {
    experiments: new Map(), // id -> {id, path, name, summary}
    rows: new Map(),        // id -> Map(key -> row)
    versions: new Map(),    // id -> version of the rows held
    loading: new Map(),     // id -> promise
    flash: new Map(),       // key -> time of its last live change
    watch: "",
    track: false,
  };

  function toRows(table) {
    const cols = table.columns;
    return table.rows.map((r) => {
      const o = {};
      for (let i = 0; i < cols.length; i++) o[cols[i]] = r[i];
      return o;
    });
  }

  async function loadExperiments() {
    const data = await api("api/experiments");
    clockSkew = Date.now() / 1000 - data.now;
    store.watch = data.watch;
    store.track = data.track;
    for (const e of data.experiments) store.experiments.set(e.id, e);
    return data;
  }

  function loadRows(id, force) {
    if (!force && store.rows.has(id)) return Promise.resolve(store.rows.get(id));
    if (store.loading.has(id)) return store.loading.get(id);
    const p = api("api/x/" + encodeURIComponent(id) + "/jobs").then((data) => {
      clockSkew = Date.now() / 1000 - data.now;
      const map = new Map();
      for (const r of toRows(data.table)) map.set(r.key, r);
      store.rows.set(id, map);
      store.versions.set(id, data.version);
      store.experiments.set(id, { id: data.id, path: data.path, name: data.name, summary: data.summary });
      return map;
    }).finally(() => store.loading.delete(id));
    store.loading.set(id, p);
    return p;
  }

  // ---------------------------------------------------------------- live updates
  let events = null;
  function connect() {
    if (events) return;
    events = new EventSource("api/events?token=" + encodeURIComponent(TOKEN));
    events.addEventListener("open", () => setLive(true));
    events.addEventListener("error", () => setLive(false));
    events.addEventListener("hello", (ev) => {
      const data = JSON.parse(ev.data);
      clockSkew = Date.now() / 1000 - data.now;
      // rows changed while we were away: read them again
      const stale = [];
      for (const [id, v] of Object.entries(data.versions)) {
        if (store.rows.has(id) && store.versions.get(id) !== v) stale.push(id);
      }
      if (stale.length) Promise.all(stale.map((id) => loadRows(id, true))).then(() => rerender());
      else loadExperiments().then(() => rerender(), () => {});
    });
    events.addEventListener("rows", (ev) => {
      const data = JSON.parse(ev.data);
      clockSkew = Date.now() / 1000 - data.now;
      const e = store.experiments.get(data.exp);
      if (e) e.summary = data.summary;
      const map = store.rows.get(data.exp);
      if (map) {
        const t = performance.now();
        for (const r of toRows(data.rows)) { map.set(r.key, r); store.flash.set(r.key, t); }
        for (const k of data.removed) map.delete(k);
        store.versions.set(data.exp, data.version);
      }
      // for tests and benchmarks: how many updates came, the last one, its counts
      window.__monitorUpdates = (window.__monitorUpdates || 0) + 1;
      window.__monitorLastUpdate = Date.now();
      window.__monitorCounts = data.summary.counts;
      rerender();
    });
    events.addEventListener("resync", () => {
      for (const id of store.rows.keys()) loadRows(id, true).then(() => rerender());
    });
  }
  function disconnect() {
    if (events) { events.close(); events = null; }
    setLive(false, "paused");
  }
  function setLive(on, text) {
    const l = $("live");
    l.className = "live " + (on ? "on" : "off");
    l.textContent = on ? "live" : (text || "reconnecting…");
  }
  // a hidden tab holds no connection (browsers allow six per server over HTTP/1.1)
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) { disconnect(); stopFollow(); }
    else { connect(); rerender(true); }
  });

  let pending = false;
  function rerender(full) {
    if (full) { render(); return; }
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (view && view.update) view.update(); else render();
    });
  }

  // ---------------------------------------------------------------- routing
  function parseHash() {
    const h = location.hash.replace(/^#\/?/, "");
    const [path, query] = h.split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    const params = new URLSearchParams(query || "");
    return { parts, params };
  }
  function href(parts, params) {
    const p = "#/" + parts.map(encodeURIComponent).join("/");
    const q = params ? params.toString() : "";
    return q ? p + "?" + q : p;
  }
  function crumbs(items) {
    const nav = $("crumbs");
    put(nav);
    items.forEach((it, i) => {
      if (i) nav.append(el("span", { class: "sep" }, "›"));
      nav.append(it.href ? el("a", { href: it.href }, it.text) : el("span", { class: "here", title: it.title || it.text }, it.text));
    });
  }

  let view = null;
  let first = true;
  async function render() {
    const { parts, params } = parseHash();
    const main = $("main");
    if (view && view.destroy) view.destroy();
    view = null;
    try {
      // a first load asks for the rows and the experiments at once
      if (parts[0] === "x" && parts[1] && !store.rows.has(parts[1])) loadRows(parts[1]).catch(() => {});
      if (!store.experiments.size) await loadExperiments();
      if (first && !location.hash && store.experiments.size === 1) {
        first = false;
        location.replace(href(["x", store.experiments.keys().next().value]));
        return;
      }
      first = false;
      if (parts[0] === "x" && parts[1]) {
        if (!store.experiments.has(parts[1])) throw new Error("no such experiment here");
        await loadRows(parts[1]);
        if (parts[2] === "job" && parts.length >= 5) view = jobView(parts[1], parts[3] + "/" + parts[4]);
        else if (parts[2] === "timeline") view = timelineView(parts[1], params);
        else view = jobsView(parts[1], params);
      } else {
        view = experimentsView();
      }
      put(main, view.node);
      if (view.mounted) view.mounted();
    } catch (e) {
      put(main, el("p", { class: "empty" }, "Cannot show this page: " + e.message));
    }
  }
  window.addEventListener("hashchange", () => render());

  // ---------------------------------------------------------------- experiments
  function stackBar(counts, total) {
    const bar = el("div", { class: "stackbar", title: Object.entries(counts).map(([s, n]) => s + " " + n).join(", ") });
    for (const s of STATES) {
      const n = counts[s];
      if (!n) continue;
      const span = el("span", { dataset: { st: s } });
      span.style.width = (100 * n / total) + "%";
      bar.append(span);
    }
    return bar;
  }
  function countChips(counts, expId) {
    const box = el("div", { class: "counts" });
    for (const s of STATES) {
      if (!counts[s]) continue;
      const params = new URLSearchParams({ state: s });
      box.append(el("a", { href: href(["x", expId], params), class: "chip " + s, dataset: { st: s } },
        s.replace(/_/g, " ") + " " + num(counts[s])));
    }
    return box;
  }
  function fact(k, v, title) {
    return el("div", { class: "fact", title }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  }

  function experimentsView() {
    crumbs([{ text: "Experiments" }]);
    const list = el("div", { class: "exp-list" });
    const node = el("div", { class: "exp-list-wrap" },
      el("div", { class: "toolbar" }, el("h1", null, "Experiments"),
        el("span", { class: "status-line" }, store.experiments.size + " shown · changes found by " + store.watch +
          (store.track ? " · --track on" : ""))),
      list);
    node.style.display = "contents";
    function update() {
      put(list);
      for (const e of store.experiments.values()) {
        const s = e.summary;
        const running = s.counts.RUNNING || 0;
        const facts = el("div", { class: "facts" },
          fact("jobs", num(s.total)),
          fact("unfinished", num(s.unfinished)),
          fact("running", num(running)),
          fact("last activity", fmtAgo(s.last_activity), fmtFull(s.last_activity)),
          fact("elapsed", fmtDuration(s.unfinished ? nowSec() - s.first : s.elapsed), "from the first record to the last end (or now)"),
          fact("run time", fmtHours(s.run_time), "every attempt's running time, added up"),
          fact("queue wait", fmtHours(s.queue_wait), "every attempt's time pending in the queue, added up"),
          fact("failed", num(s.total - s.unfinished - (s.counts.COMPLETED || 0) - (s.counts.CANCELLED || 0)), "ended in another state than COMPLETED or CANCELLED"));
        list.append(el("section", { class: "panel exp" },
          el("div", null,
            el("a", { class: "title", href: href(["x", e.id]) }, e.name || e.path),
            pathNode("path", e.path),
            el("div", { class: "links" },
              el("a", { href: href(["x", e.id]) }, "Jobs"),
              el("a", { href: href(["x", e.id, "timeline"]) }, "Timeline"))),
          el("div", null,
            s.total ? stackBar(s.counts, s.total) : el("div", { class: "muted" }, "no job yet"),
            countChips(s.counts, e.id),
            el("div", { style: null }, facts))));
      }
      if (!store.experiments.size) list.append(el("p", { class: "empty" }, "No experiment."));
    }
    update();
    const timer = setInterval(update, 5000);
    return { node, update, destroy: () => clearInterval(timer) };
  }

  // ---------------------------------------------------------------- jobs: toolbar shared with the timeline
  function readFilter(params) {
    const states = new Set((params.get("state") || "").split(",").filter(Boolean));
    return { states, q: params.get("q") || "" };
  }
  function filterRows(rows, f) {
    const q = f.q.toLowerCase();
    const out = [];
    for (const r of rows) {
      if (f.states.size && !f.states.has(r.state)) continue;
      if (q && !r.task_id.toLowerCase().includes(q)) continue;
      out.push(r);
    }
    return out;
  }

  function toolbar(expId, params, tab, onChange) {
    const f = readFilter(params);
    const filters = el("div", { class: "filters" });
    const search = el("input", { type: "search", placeholder: "filter by name…", value: f.q, "aria-label": "filter by name" });
    const cancelAll = el("button", { class: "btn danger", type: "button" }, "Cancel unfinished");
    const bar = el("div", { class: "toolbar" },
      el("div", { class: "tabs" },
        el("a", { href: href(["x", expId], params), class: tab === "jobs" ? "on" : "" }, "Jobs"),
        el("a", { href: href(["x", expId, "timeline"], params), class: tab === "timeline" ? "on" : "" }, "Timeline")),
      filters, search, el("div", { class: "spacer" }), cancelAll);
    function setParams() {
      const p = new URLSearchParams(params);
      if (f.states.size) p.set("state", [...f.states].join(",")); else p.delete("state");
      if (f.q) p.set("q", f.q); else p.delete("q");
      params = p;
      history.replaceState(null, "", href(["x", expId].concat(tab === "timeline" ? ["timeline"] : []), p));
      bar.querySelectorAll(".tabs a")[0].setAttribute("href", href(["x", expId], p));
      bar.querySelectorAll(".tabs a")[1].setAttribute("href", href(["x", expId, "timeline"], p));
      onChange(f);
    }
    search.addEventListener("input", () => { f.q = search.value; setParams(); });
    cancelAll.addEventListener("click", async () => {
      const rows = [...store.rows.get(expId).values()].filter((r) => UNFINISHED.has(r.state));
      if (!rows.length) { toast("No unfinished job to cancel."); return; }
      const e = store.experiments.get(expId);
      if (!await confirmDialog("Cancel all " + num(rows.length) + " unfinished jobs of " + e.path + "?", "Cancel " + num(rows.length) + " jobs")) return;
      try {
        const res = await api("api/x/" + encodeURIComponent(expId) + "/cancel", { method: "POST" });
        toast("Cancel requested for " + num(res.requested) + " jobs.");
      } catch (err) { toast("Cancel failed: " + err.message, true); }
    });
    function update() {
      const rows = store.rows.get(expId);
      const counts = {};
      let unfinished = 0;
      for (const r of rows.values()) {
        counts[r.state] = (counts[r.state] || 0) + 1;
        if (UNFINISHED.has(r.state)) unfinished++;
      }
      put(filters);
      const all = el("button", { type: "button", class: "filter" + (f.states.size ? "" : " on") }, "All ", el("b", null, num(rows.size)));
      all.addEventListener("click", () => { f.states.clear(); setParams(); update(); });
      filters.append(all);
      for (const s of STATES) {
        if (!counts[s] && !f.states.has(s)) continue;
        const b = el("button", { type: "button", class: "filter" + (f.states.has(s) ? " on" : ""), dataset: { st: s, state: s } },
          el("i"), s.replace(/_/g, " ") + " ", el("b", null, num(counts[s] || 0)));
        b.addEventListener("click", (ev) => {
          if (ev.ctrlKey || ev.metaKey || ev.shiftKey) { if (f.states.has(s)) f.states.delete(s); else f.states.add(s); }
          else if (f.states.size === 1 && f.states.has(s)) f.states.clear();
          else { f.states.clear(); f.states.add(s); }
          setParams(); update();
        });
        filters.append(b);
      }
      cancelAll.disabled = unfinished === 0;
      cancelAll.textContent = unfinished ? "Cancel unfinished (" + num(unfinished) + ")" : "Cancel unfinished";
    }
    update();
    return { node: bar, update, filter: f };
  }

  // ---------------------------------------------------------------- jobs table
  const COLUMNS = [
    { key: "task_id", label: "Job", width: "22%" },
    { key: "state", label: "State", width: "128px", sort: (r) => STATES.indexOf(r.state) },
    { key: "kind", label: "Kind", width: "64px" },
    { key: "group", label: "Group", width: "96px" },
    { key: "partition", label: "Partition", width: "86px" },
    { key: "native_id", label: "Native id", width: "86px", sort: (r) => (r.native_id === null ? null : (isNaN(+r.native_id.split("_")[0]) ? r.native_id : +r.native_id.split("_")[0] + (+(r.native_id.split("_")[1] || 0)) / 1e6)) },
    { key: "attempt", label: "Att.", width: "46px", num: true },
    { key: "submitted", label: "Submitted", width: "112px" },
    { key: "started", label: "Started", width: "112px" },
    { key: "ended", label: "Ended", width: "112px" },
    { key: "duration", label: "Run time", width: "92px", num: true, sort: (r) => runTime(r) },
    { key: "after", label: "After", width: "120px", edges: true, sort: (r) => (r.after || []).length },
    { key: "reason", label: "Reason", width: "auto" },
  ];
  function runTime(r) {
    if (r.started === null || r.started === undefined) return null;
    const end = r.ended !== null && r.ended !== undefined ? r.ended : (UNFINISHED.has(r.state) ? nowSec() : r.changed);
    return Math.max(0, end - r.started);
  }
  function cell(col, r, expId) {
    switch (col.key) {
      case "task_id": {
        const [name, digest] = r.key.split("/");
        return el("td", { class: "name", title: r.task_id },
          el("a", { href: href(["x", expId, "job", name, digest]) }, name, el("span", { class: "digest" }, "-" + digest.slice(0, 8))));
      }
      case "state": return el("td", null, chip(r.state));
      case "submitted": case "started": case "ended":
        return el("td", { title: fmtFull(r[col.key]) }, fmtTime(r[col.key]));
      case "duration": {
        const d = runTime(r);
        return el("td", { class: "num" }, d === null ? "–" : fmtDuration(d));
      }
      case "attempt": return el("td", { class: "num" }, r.attempt);
      case "after": return el("td", { title: (r.after || []).join("\n") }, (r.after || []).map((k) => k.split("/")[0]).join(", "));
      case "reason": return el("td", { class: "reason", title: r.reason || "" }, r.reason || "");
      default: return el("td", { title: r[col.key] || "" }, r[col.key] === null || r[col.key] === undefined ? "–" : r[col.key]);
    }
  }

  function jobsView(expId, params) {
    const e = store.experiments.get(expId);
    crumbs([{ text: "Experiments", href: "#/" }, { text: e.name, title: e.path }]);
    const ROW_H = 32;
    let sortKey = params.get("sort") || "submitted";
    let desc = params.get("dir") ? params.get("dir") === "desc" : true;
    let shown = [];
    let lastSig = "";
    const status = el("span", { class: "status-line" });
    const bar = toolbar(expId, params, "jobs", () => { lastSig = ""; update(); });
    const colgroup = el("colgroup");
    const headRow = el("tr");
    const thead = el("thead", null, headRow);
    const tbody = el("tbody");
    const table = el("table", { class: "jobs" }, colgroup, thead, tbody);
    const wrap = el("div", { class: "table-wrap" }, table);
    const node = el("div", { class: "jobs-view" }, bar.node, status, wrap);
    node.style.display = "contents";

    function columns() {
      const anyEdges = [...store.rows.get(expId).values()].some((r) => r.after && r.after.length);
      return COLUMNS.filter((c) => !c.edges || anyEdges);
    }
    function header(cols) {
      put(colgroup, ...cols.map((c) => { const col = el("col"); col.style.width = c.width; return col; }));
      put(headRow, ...cols.map((c) => {
        const th = el("th", { class: (c.num ? "num " : "") + (c.key === sortKey ? "sorted" : ""), dataset: { col: c.key }, title: "sort by " + c.label.toLowerCase() },
          c.label, c.key === sortKey ? el("span", { class: "arrow" }, desc ? "▼" : "▲") : null);
        th.addEventListener("click", () => {
          if (sortKey === c.key) desc = !desc; else { sortKey = c.key; desc = c.key !== "task_id" && c.key !== "state" && c.key !== "reason"; }
          const p = new URLSearchParams(location.hash.split("?")[1] || "");
          p.set("sort", sortKey); p.set("dir", desc ? "desc" : "asc");
          history.replaceState(null, "", href(["x", expId], p));
          lastSig = ""; update();
        });
        return th;
      }));
    }
    function sortRows(rows) {
      const col = COLUMNS.find((c) => c.key === sortKey) || COLUMNS[0];
      const key = col.sort || ((r) => r[col.key]);
      const dir = desc ? -1 : 1;
      const keyed = rows.map((r) => [key(r), r]);
      keyed.sort((a, b) => {
        const x = a[0], y = b[0];
        if (x === y || (x == null && y == null)) return a[1].key < b[1].key ? -1 : 1;
        if (x == null) return 1;
        if (y == null) return -1;
        if (typeof x === "number" && typeof y === "number") return (x - y) * dir;
        return String(x).localeCompare(String(y), undefined, { numeric: true }) * dir;
      });
      return keyed.map((k) => k[1]);
    }
    let cols = columns();
    function paint() {
      const top = wrap.scrollTop;
      const height = wrap.clientHeight || 600;
      const start = Math.max(0, Math.floor(top / ROW_H) - 10);
      const end = Math.min(shown.length, Math.ceil((top + height) / ROW_H) + 10);
      const padTop = el("tr", { class: "pad" }, el("td", { colspan: cols.length }));
      padTop.firstChild.style.height = (start * ROW_H) + "px";
      const padBottom = el("tr", { class: "pad" }, el("td", { colspan: cols.length }));
      padBottom.firstChild.style.height = ((shown.length - end) * ROW_H) + "px";
      const now = performance.now();
      const trs = [padTop];
      for (let i = start; i < end; i++) {
        const r = shown[i];
        const flash = store.flash.get(r.key);
        const tr = el("tr", { class: "row" + (flash && now - flash < 2000 ? " flash" : ""), dataset: { key: r.key, state: r.state } });
        for (const c of cols) tr.append(cell(c, r, expId));
        trs.push(tr);
      }
      trs.push(padBottom);
      put(tbody, ...trs);
    }
    function update() {
      bar.update();
      const newCols = columns();
      if (newCols.length !== cols.length || !lastSig) { cols = newCols; header(cols); }
      const all = [...store.rows.get(expId).values()];
      shown = sortRows(filterRows(all, bar.filter));
      lastSig = "x";
      status.textContent = (shown.length === all.length ? num(all.length) + " jobs" : num(shown.length) + " of " + num(all.length) + " jobs") +
        " · sorted by " + (COLUMNS.find((c) => c.key === sortKey) || COLUMNS[0]).label.toLowerCase() + (desc ? ", newest/largest first" : "");
      paint();
      window.__monitorRendered = Date.now();
    }
    let scheduled = false;
    wrap.addEventListener("scroll", () => {
      if (scheduled) return;
      scheduled = true;
      requestAnimationFrame(() => { scheduled = false; paint(); });
    });
    tbody.addEventListener("click", (ev) => {
      const tr = ev.target.closest("tr.row");
      if (!tr || ev.target.closest("a")) return;
      const [name, digest] = tr.dataset.key.split("/");
      location.hash = href(["x", expId, "job", name, digest]);
    });
    const timer = setInterval(() => paint(), 5000); // run times of running jobs
    return { node, update, mounted: update, destroy: () => clearInterval(timer) };
  }

  // ---------------------------------------------------------------- one job
  let follow = null;
  function stopFollow() { if (follow) { follow.close(); follow = null; } }

  function cleanLog(text) {
    // terminal colour codes out; a line redrawn with \r shows its last state (progress bars)
    text = text.replace(/\x1b\[[0-9;?]*[ -\/]*[@-~]/g, "");
    if (text.indexOf("\r") < 0) return text;
    return text.split("\n").map((line) => {
      const trimmed = line.endsWith("\r") ? line.slice(0, -1) : line;
      const i = trimmed.lastIndexOf("\r");
      return i < 0 ? trimmed : trimmed.slice(i + 1);
    }).join("\n");
  }

  function jobView(expId, key) {
    const e = store.experiments.get(expId);
    const [name, digest] = key.split("/");
    const base = "api/x/" + encodeURIComponent(expId) + "/job/" + encodeURIComponent(name) + "/" + encodeURIComponent(digest);
    crumbs([{ text: "Experiments", href: "#/" }, { text: e.name, href: href(["x", expId]), title: e.path }, { text: name + "-" + digest.slice(0, 8) }]);
    const head = el("div", { class: "job-head" });
    const side = el("div", { class: "job-side" });
    const mainCol = el("div", { class: "job-main" });
    const node = el("div", { class: "job-view" }, head, el("div", { class: "job-grid" }, side, mainCol));
    node.style.display = "contents";

    // output panel, followed live
    const logs = { "job.out": "", "job.err": "" };
    const notes = { "job.out": "", "job.err": "" };
    const sizes = { "job.out": 0, "job.err": 0 };
    let current = "job.out";
    let archived = null; // {attempt, file} when showing an earlier attempt's output
    const pre = el("pre", { class: "log", id: "log", tabindex: "0" });
    const tabOut = el("a", { href: "#", class: "on", dataset: { file: "job.out" } }, "job.out");
    const tabErr = el("a", { href: "#", dataset: { file: "job.err" } }, "job.err");
    const followBox = el("input", { type: "checkbox", checked: true });
    const raw = el("a", { target: "_blank", rel: "noopener" }, "raw");
    const sizeNote = el("span", { class: "faint" });
    const outputPanel = el("section", { class: "panel output" },
      el("div", { class: "output-head" }, el("h2", { style: null }, "Output"),
        el("div", { class: "tabs" }, tabOut, tabErr), sizeNote, el("div", { class: "grow" }),
        el("label", null, followBox, "follow"), raw),
      pre);
    // the view sticks to the end of the output while it is scrolled there (as `tail -f`)
    let stick = true;
    pre.addEventListener("scroll", () => { stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 30; });
    function showLog() {
      const keep = stick;
      put(pre);
      if (archived) {
        pre.append(el("span", { class: "note" }, "attempt " + archived.attempt + ", " + archived.file + " (archived)\n"), archived.text);
      } else {
        if (notes[current]) pre.append(el("span", { class: "note" }, notes[current] + "\n"));
        const text = logs[current];
        pre.append(text ? cleanLog(text) : el("span", { class: "note" }, current + " is empty (or not written yet)"));
        sizeNote.textContent = fmtBytes(sizes[current]);
      }
      if (followBox.checked && keep) { pre.scrollTop = pre.scrollHeight; stick = true; }
      raw.setAttribute("href", base + "/file?name=" + (archived ? archived.file + "&attempt=" + archived.attempt : current) + "&token=" + encodeURIComponent(TOKEN));
    }
    for (const tab of [tabOut, tabErr]) {
      tab.addEventListener("click", (ev) => {
        ev.preventDefault();
        archived = null;
        current = tab.dataset.file;
        tabOut.className = current === "job.out" ? "on" : "";
        tabErr.className = current === "job.err" ? "on" : "";
        stick = true;
        showLog();
      });
    }
    function startFollow() {
      stopFollow();
      follow = new EventSource(base + "/follow?token=" + encodeURIComponent(TOKEN));
      follow.addEventListener("output", (ev) => {
        const d = JSON.parse(ev.data);
        if (d.reset) {
          logs[d.file] = "";
          notes[d.file] = d.skipped ? "… " + fmtBytes(d.skipped) + " before this not shown (open raw for all of it)" : "";
        }
        let text = logs[d.file] + d.text;
        if (text.length > LOG_KEEP) {
          text = text.slice(text.length - LOG_KEEP);
          notes[d.file] = "… earlier output not shown (open raw for all of it)";
        }
        logs[d.file] = text;
        sizes[d.file] = d.offset;
        if (d.file === current && !archived) showLog();
        window.__monitorOutput = (window.__monitorOutput || 0) + 1;
      });
    }

    let detail = null;
    let lastRow = null;
    async function load() {
      try {
        detail = await api(base);
      } catch (err) {
        put(head, el("p", { class: "empty" }, "Cannot read this job: " + err.message));
        return;
      }
      draw();
    }
    function draw() {
      const d = detail;
      if (d.error_reading) {
        put(head, el("h1", null, key), el("p", { class: "empty" }, d.error_reading));
        return;
      }
      const rec = d.record;
      const row = store.rows.get(expId).get(key) || d.row;
      lastRow = row;
      const cancel = el("button", { class: "btn danger", type: "button", id: "cancel-job" }, "Cancel job");
      cancel.disabled = !UNFINISHED.has(row.state);
      cancel.addEventListener("click", async () => {
        if (!await confirmDialog("Cancel " + rec.task_id + " (" + (rec.native_id || "not submitted") + ")?", "Cancel job")) return;
        try {
          await api(base + "/cancel", { method: "POST" });
          toast("Cancel requested for " + rec.task_id + ".");
        } catch (err) { toast("Cancel failed: " + err.message, true); }
      });
      put(head, el("h1", null, rec.task_id), chip(row.state),
        row.reason ? el("span", { class: "reason" }, row.reason) : null, el("div", { class: "spacer" }), cancel);

      // facts
      const launcher = rec.launcher || {};
      const ps = d.phases || [];
      const sum = (k) => ps.filter((p) => p[0] === k).reduce((a, p) => a + (p[2] - p[1]), 0);
      const live = UNFINISHED.has(row.state);
      const facts = el("dl", { class: "facts" });
      const add = (k, v, cls) => facts.append(el("dt", null, k), el("dd", { class: cls }, v));
      add("state", chip(row.state));
      if (row.reason) add("reason", row.reason);
      add("native id", (rec.native_id || "–") + (rec.cluster ? " on " + rec.cluster : ""));
      add("attempt", String(rec.attempt) + (rec.attempts.length ? " (" + rec.attempts.length + " before)" : ""));
      add("launcher", [launcher.kind, launcher.group, launcher.connector && launcher.connector !== "local" ? "via " + launcher.connector : null].filter(Boolean).join(" · ") || "–");
      if (row.partition) add("partition", row.partition);
      add("submitted", rec.submitted_at ? fmtFull(row.submitted) : "–");
      add("started", rec.started_at ? fmtFull(row.started) : "–");
      add("ended", rec.ended_at ? fmtFull(row.ended) : "–");
      add("queue wait", ps.some((p) => p[0] === "pending") ? fmtDuration(live && row.started == null && row.submitted != null ? nowSec() - row.submitted : sum("pending")) : "–");
      add("run time", row.started != null ? fmtDuration(runTime(row)) : "–");
      if (rec.exit_code !== null || rec.signal !== null) add("exit", (rec.exit_code === null ? "–" : "code " + rec.exit_code) + (rec.signal ? ", signal " + rec.signal : ""));
      facts.append(el("dt", null, "directory"), el("dd", { class: "mono" }, pathNode("path", d.directory)));
      const bar = el("div", { class: "phasebar", title: "waiting · pending · running" });
      const t0 = ps.length ? ps[0][1] : 0;
      const t1 = ps.length ? Math.max(...ps.map((p) => p[2])) : 0;
      for (const [phase, a, b] of ps) {
        const span = el("span", { class: phase, dataset: { st: row.state } });
        span.style.width = (t1 > t0 ? 100 * (b - a) / (t1 - t0) : 0) + "%";
        bar.append(span);
      }
      put(side, 
        el("section", { class: "panel section" }, el("h2", null, "Job"), facts,
          ps.length ? bar : null,
          ps.length ? el("div", { class: "legend" },
            el("span", null, el("i", { class: "wait" }), "waiting (local)"),
            el("span", { dataset: { st: row.state } }, el("i", { class: "pend" }), "pending (queue)"),
            el("span", { dataset: { st: row.state } }, el("i"), "running")) : null),
        edgesPanel(d),
        historyPanel(rec),
        attemptsPanel(rec, d));

      // main column: output, result or error, script and options, parameters
      const extra = [];
      if (d.error) extra.push(el("section", { class: "panel section" }, el("h2", null, "Error"),
        el("pre", { class: "code error" }, d.error.type ? d.error.type + ": " + (d.error.message || "") + "\n\n" + (d.error.traceback || "") : JSON.stringify(d.error, null, 2))));
      if (d.result) extra.push(el("section", { class: "panel section" }, el("h2", null, "Result"),
        d.result.kind === "json" ? el("pre", { class: "code", id: "result" }, JSON.stringify(d.result.value, null, 2))
          : el("p", { class: "muted" }, "result.pickle (" + fmtBytes(d.result.size) + "): a Python object, read it with job.result()")));
      extra.push(el("section", { class: "panel section" }, el("h2", null, "Script"),
        d.options.length ? el("div", { class: "options", title: "the exact sbatch options" }, ...d.options.map((o) => el("code", null, o))) : null,
        d.script ? el("pre", { class: "code", id: "script" }, d.script.text + (d.script.truncated ? "\n… (" + fmtBytes(d.script.size) + " in all)" : "")) : el("p", { class: "muted" }, "no job.sh yet")));
      if (d.params) extra.push(el("section", { class: "panel section" }, el("h2", null, "Parameters"),
        el("pre", { class: "code" }, JSON.stringify(d.params, null, 2))));
      if (outputPanel.parentNode !== mainCol) put(mainCol, outputPanel, ...extra);
      else { while (outputPanel.nextSibling) outputPanel.nextSibling.remove(); mainCol.append(...extra); }
      showLog();
    }

    function edgesPanel(d) {
      const e = d.edges || {};
      if (!(e.after && e.after.length) && !(e.before && e.before.length)) return null;
      const list = (title, keys) => keys.length ? el("div", null, el("div", { class: "muted" }, title),
        ...keys.map((k) => el("div", null, el("a", { href: href(["x", expId, "job"].concat(k.split("/"))) }, k.replace("/", "-"))))) : null;
      return el("section", { class: "panel section edges" }, el("h2", null, "Dependencies"),
        list("runs after", e.after || []), list("needed by", e.before || []));
    }
    function historyPanel(rec) {
      const rows = rec.history.slice().reverse().map(([t, s, detail]) => el("tr", null,
        el("td", { title: t }, t.replace("T", " ").slice(0, 19)), el("td", null, chip(s)), el("td", { class: "detail" }, detail)));
      return el("section", { class: "panel section" }, el("h2", null, "History"),
        el("div", { class: "history-wrap" }, el("table", { class: "small", id: "history" },
          el("thead", null, el("tr", null, el("th", null, "time"), el("th", null, "state"), el("th", null, "detail"))),
          el("tbody", null, ...rows))));
    }
    function attemptsPanel(rec, d) {
      if (!d.attempts.length) return null;
      const rows = d.attempts.slice().reverse().map((a) => {
        const links = el("td");
        for (const f of ["job.out", "job.err"]) {
          if (a.files && a.files[f] !== null && a.files[f] !== undefined) {
            const link = el("a", { href: "#" }, f);
            link.addEventListener("click", async (ev) => {
              ev.preventDefault();
              const res = await fetch(base + "/file?name=" + f + "&attempt=" + a.attempt, { headers: { "X-Launchers-Token": TOKEN } });
              archived = { attempt: a.attempt, file: f, text: res.ok ? cleanLog(await res.text()) : "(cannot read it)" };
              showLog();
            });
            links.append(link, " ");
          }
        }
        return el("tr", null, el("td", null, String(a.attempt)), el("td", null, a.native_id || "–"),
          el("td", null, a.state ? chip(a.state) : "–"), el("td", { class: "detail" }, [a.cause, a.reason].filter(Boolean).join(": ")), links);
      });
      return el("section", { class: "panel section" }, el("h2", null, "Attempts"),
        el("table", { class: "small" }, el("thead", null, el("tr", null, el("th", null, "#"), el("th", null, "id"), el("th", null, "state"), el("th", null, "cause"), el("th", null, "output"))),
          el("tbody", null, ...rows)));
    }

    function update() {
      const row = store.rows.get(expId).get(key);
      if (row && lastRow && (row.state !== lastRow.state || row.attempt !== lastRow.attempt || row.native_id !== lastRow.native_id || row.changed !== lastRow.changed)) load();
    }
    return {
      node, update,
      mounted: () => { startFollow(); load(); },
      destroy: () => stopFollow(),
    };
  }

  // ---------------------------------------------------------------- timeline
  function timelineView(expId, params) {
    const e = store.experiments.get(expId);
    crumbs([{ text: "Experiments", href: "#/" }, { text: e.name, href: href(["x", expId]), title: e.path }, { text: "Timeline" }]);
    const bar = toolbar(expId, params, "timeline", () => { update(); });
    const summaryBox = el("section", { class: "panel section tl-summary" });
    const axis = el("canvas", { class: "tl-axis" });
    const canvas = el("canvas");
    const spacer = el("div", { class: "tl-spacer" });
    const scroll = el("div", { class: "tl-scroll" }, canvas, spacer);
    const legend = el("div", { class: "legend" });
    const chart = el("section", { class: "panel tl-chart" },
      el("div", { class: "output-head" }, el("h2", null, "Jobs over time"), legend), axis, scroll);
    const node = el("div", null, bar.node, summaryBox, chart);
    node.style.display = "contents";
    let rows = [], t0 = 0, t1 = 1, rowH = 16, label = 0;
    const tip = $("tooltip");

    function phasesOf(r, now) {
      // the same phases as the server's model.phases, for drawing
      const out = [];
      for (const [, sub, sta, end] of (r.prev || [])) {
        if (sub !== null) { const stop = sta !== null ? sta : end; if (stop !== null) out.push(["pending", sub, Math.max(sub, stop)]); }
        if (sta !== null && end !== null) out.push(["running", sta, Math.max(sta, end)]);
      }
      const final = !UNFINISHED.has(r.state);
      let end = r.ended;
      if (final && end == null) end = r.changed;
      const stopAll = end != null ? end : now;
      const sub = r.submitted, sta = r.started, since = r.waiting_since;
      if (since != null) { const stop = sub != null ? sub : (sta != null ? sta : stopAll); if (stop > since) out.push(["waiting", since, stop]); }
      if (sub != null) out.push(["pending", sub, Math.max(sub, sta != null ? sta : stopAll)]);
      if (sta != null) out.push(["running", sta, Math.max(sta, stopAll)]);
      return out;
    }

    async function loadSummary() {
      try {
        const data = await api("api/x/" + encodeURIComponent(expId) + "/timeline");
        drawSummary(data.groups);
        layout();
        place();
      } catch (err) { put(summaryBox, el("p", { class: "muted" }, "summary unavailable: " + err.message)); }
    }
    function drawSummary(groups) {
      const body = el("tbody");
      for (const g of groups) {
        const share = g.queue_share;
        const sb = el("div", { class: "share", title: "queue wait " + fmtHours(g.queue_total) + " · run time " + fmtHours(g.run_total) });
        const q = el("span", { class: "q" }), r = el("span", { class: "r" });
        q.style.width = ((share || 0) * 100) + "%"; r.style.width = (share === null ? 0 : (1 - share) * 100) + "%";
        sb.append(q, r);
        const verdict = share === null ? el("span", { class: "muted" }, "nothing ran yet")
          : share >= 0.5 ? el("span", { class: "verdict queue" }, "the queue: " + Math.round(share * 100) + " % waiting")
            : el("span", { class: "verdict run" }, "running: " + Math.round((1 - share) * 100) + " % of the time");
        body.append(el("tr", null,
          el("td", null, g.group), el("td", null, g.partition),
          el("td", { class: "num" }, num(g.jobs)), el("td", { class: "num" }, num(g.attempts)),
          el("td", { class: "num" }, fmtHours(g.queue_total)), el("td", { class: "num" }, fmtDuration(g.queue_median)), el("td", { class: "num" }, fmtDuration(g.queue_max)),
          el("td", { class: "num" }, fmtHours(g.run_total)), el("td", { class: "num" }, fmtDuration(g.run_median)), el("td", { class: "num" }, fmtDuration(g.run_max)),
          el("td", null, sb), el("td", null, verdict)));
      }
      const anyLocal = groups.some((g) => g.local_wait > 0);
      put(summaryBox, el("h2", null, "Where the time went: queue wait against run time"),
        groups.length ? el("table", { id: "wait-run" },
          el("thead", null, el("tr", null, el("th", null, "group"), el("th", null, "partition"), el("th", { class: "num" }, "jobs"), el("th", { class: "num" }, "attempts"),
            el("th", { class: "num" }, "queue wait"), el("th", { class: "num" }, "median"), el("th", { class: "num" }, "max"),
            el("th", { class: "num" }, "run time"), el("th", { class: "num" }, "median"), el("th", { class: "num" }, "max"),
            el("th", null, "queue ▮ run"), el("th", null, "mostly"))), body)
          : el("p", { class: "muted" }, "no job yet"),
        anyLocal ? el("p", { class: "muted" }, "Held locally before submission (waiting): " + groups.filter((g) => g.local_wait > 0).map((g) => g.group + " " + fmtHours(g.local_wait)).join(", ")) : null);
    }

    function layout() {
      const now = nowSec();
      const all = filterRows([...store.rows.get(expId).values()], bar.filter);
      rows = all.map((r) => ({ r, ps: phasesOf(r, now) })).filter((x) => x.ps.length);
      rows.sort((a, b) => (a.ps[0][1] - b.ps[0][1]) || (a.r.key < b.r.key ? -1 : 1));
      t0 = Infinity; t1 = -Infinity;
      for (const x of rows) for (const p of x.ps) { t0 = Math.min(t0, p[1]); t1 = Math.max(t1, p[2]); }
      if (!rows.length) { t0 = now - 3600; t1 = now; }
      if (t1 - t0 < 30) t1 = t0 + 30;
      const pad = (t1 - t0) * 0.02; t1 += pad;
      rowH = rows.length <= 60 ? 20 : rows.length <= 300 ? 10 : rows.length <= 2000 ? 5 : 3;
      label = rowH >= 20 ? 210 : 0;
      spacer.style.height = Math.max(0, rows.length * rowH - scroll.clientHeight) + "px";
      scroll.style.overflowY = rows.length * rowH > scroll.clientHeight ? "auto" : "hidden";
      const states = new Set(rows.map((x) => x.r.state));
      put(legend, el("span", null, el("i", { class: "wait" }), "waiting (local)"),
        el("span", null, el("i", { class: "pend", dataset: { st: "COMPLETED" } }), "pending (queue): the job's colour, striped"),
        el("span", null, "running, by final state:"),
        ...STATES.filter((s) => states.has(s) && !NEVER_RAN.has(s)).map((s) => el("span", { dataset: { st: s } }, el("i"), s.toLowerCase().replace(/_/g, " "))));
    }
    function setup(c, w, h) {
      const dpr = window.devicePixelRatio || 1;
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
      c.style.width = w + "px"; c.style.height = h + "px";
      const ctx = c.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      return ctx;
    }
    function niceStep(span, px) {
      const steps = [5, 10, 15, 30, 60, 300, 600, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
      const want = span / Math.max(1, px / 110);
      return steps.find((s) => s >= want) || 604800;
    }
    // a pending phase: the job's colour in light diagonal stripes
    const patterns = {};
    function stripes(ctx, color) {
      if (patterns[color]) return patterns[color];
      const p = document.createElement("canvas");
      p.width = 6; p.height = 6;
      const g = p.getContext("2d");
      g.globalAlpha = 0.22; g.fillStyle = color; g.fillRect(0, 0, 6, 6);
      g.globalAlpha = 0.75; g.strokeStyle = color; g.lineWidth = 1.4;
      g.beginPath(); g.moveTo(-1, 7); g.lineTo(7, -1); g.moveTo(-1, 1); g.lineTo(1, -1); g.moveTo(5, 7); g.lineTo(7, 5); g.stroke();
      return (patterns[color] = ctx.createPattern(p, "repeat"));
    }
    function x(t, w) { return label + (t - t0) / (t1 - t0) * (w - label - 12); }
    function draw() {
      const w = scroll.clientWidth, h = scroll.clientHeight;
      if (!w || !h) return;
      const ax = setup(axis, w, 30);
      ax.clearRect(0, 0, w, 30);
      ax.font = "11px " + css("--sans");
      ax.fillStyle = css("--muted");
      ax.strokeStyle = css("--line");
      const step = niceStep(t1 - t0, w - label);
      const first = Math.ceil(t0 / step) * step;
      const now = nowSec();
      const ctx = setup(canvas, w, h);
      ctx.clearRect(0, 0, w, h);
      for (let t = first; t <= t1; t += step) {
        const px = x(t, w);
        const d = new Date(t * 1000);
        const text = step >= 86400 ? MONTHS[d.getMonth()] + " " + d.getDate()
          : pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + (step < 60 ? ":" + pad2(d.getSeconds()) : "");
        ax.fillText(text, px + 3, 23);
        ax.fillRect(px, 20, 1, 10);
        ctx.fillStyle = css("--line");
        ctx.fillRect(px, 0, 1, h);
      }
      if (now <= t1) {
        const px = x(now, w);
        ctx.fillStyle = "rgba(47,111,208,0.5)";
        ctx.fillRect(px, 0, 1.5, h);
        ax.fillStyle = css("--accent");
        ax.fillRect(px, 0, 1.5, 30);
        ax.fillText("now", px - ax.measureText("now").width - 4, 10);
      }
      const top = scroll.scrollTop;
      const firstRow = Math.max(0, Math.floor(top / rowH));
      const lastRow = Math.min(rows.length, Math.ceil((top + h) / rowH));
      const barH = Math.max(1, rowH - (rowH >= 10 ? 6 : rowH >= 5 ? 1 : 0));
      ctx.font = "11.5px " + css("--mono");
      const colors = {};
      for (let i = firstRow; i < lastRow; i++) {
        const { r, ps } = rows[i];
        const y = i * rowH - top;
        const c = colors[r.state] || (colors[r.state] = stateColor(r.state));
        if (label) {
          ctx.fillStyle = css("--text");
          const text = r.task_id.length > 28 ? r.task_id.slice(0, 27) + "…" : r.task_id;
          ctx.fillText(text, 6, y + rowH / 2 + 4);
        }
        for (const [phase, a, b] of ps) {
          const x0 = x(a, w), x1 = Math.max(x0 + 1, x(b, w));
          if (phase === "waiting") {
            ctx.fillStyle = "#c3c9d2";
            const hh = Math.max(1, Math.round(barH / 3));
            ctx.fillRect(x0, y + (rowH - hh) / 2, x1 - x0, hh);
          } else {
            ctx.fillStyle = phase === "pending" && barH >= 4 ? stripes(ctx, c) : c;
            ctx.globalAlpha = phase === "pending" && barH < 4 ? 0.35 : 1;
            ctx.fillRect(x0, y + (rowH - barH) / 2, x1 - x0, barH);
            ctx.globalAlpha = 1;
          }
        }
      }
      if (!rows.length) {
        ctx.fillStyle = css("--muted");
        ctx.font = "13px " + css("--sans");
        ctx.fillText("No job to show.", 16, 28);
      }
    }
    function at(ev) {
      const rect = canvas.getBoundingClientRect();
      const i = Math.floor((ev.clientY - rect.top + scroll.scrollTop) / rowH);
      return rows[i];
    }
    canvas.addEventListener("mousemove", (ev) => {
      const hit = at(ev);
      if (!hit) { tip.hidden = true; return; }
      const { r, ps } = hit;
      const sum = (k) => ps.filter((p) => p[0] === k).reduce((a, p) => a + p[2] - p[1], 0);
      tip.textContent = r.task_id + "\n" + r.state + (r.native_id ? "  ·  " + r.native_id : "") + (r.partition ? "  ·  " + r.partition : "") +
        "\nwaiting " + fmtDuration(sum("waiting")) + " · queue " + fmtDuration(sum("pending")) + " · running " + fmtDuration(sum("running")) +
        (r.reason ? "\n" + r.reason : "");
      tip.hidden = false;
      tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 430) + "px";
      tip.style.top = (ev.clientY + 14) + "px";
      canvas.style.cursor = "pointer";
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (ev) => {
      const hit = at(ev);
      if (hit) { tip.hidden = true; location.hash = href(["x", expId, "job"].concat(hit.r.key.split("/"))); }
    });
    scroll.addEventListener("scroll", () => requestAnimationFrame(draw));
    const onResize = () => { layout(); draw(); };
    window.addEventListener("resize", onResize);
    let summaryDue = 0;
    // the chart opens on the jobs in flight (the first unfinished one near the top), until the
    // user scrolls it; placed again once the summary above has taken its height
    let autoTop = null;
    function place() {
      if (autoTop === false || !rows.length) return;
      const i = rows.findIndex((x) => UNFINISHED.has(x.r.state));
      draw();  // the canvas at the scroller's height first: the scroll range depends on it
      scroll.scrollTop = i > 3 ? (i - 3) * rowH : 0;
      autoTop = scroll.scrollTop;
      draw();
    }
    scroll.addEventListener("scroll", () => {
      if (autoTop !== null && autoTop !== false && Math.abs(scroll.scrollTop - autoTop) > 1) autoTop = false;
    });
    function update() {
      bar.update();
      layout();
      if (autoTop === null) place();
      draw();
      if (Date.now() >= summaryDue) { summaryDue = Date.now() + 2000; loadSummary(); }
      window.__monitorRendered = Date.now();
    }
    const timer = setInterval(() => { layout(); draw(); }, 5000);
    return {
      node, update, mounted: update,
      destroy: () => { clearInterval(timer); window.removeEventListener("resize", onResize); tip.hidden = true; },
    };
  }

  // ---------------------------------------------------------------- start
  connect();
  render();
})();
