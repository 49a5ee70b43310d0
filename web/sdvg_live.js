// SDVG Live: the panel on the SDVG Live node (docs/live.md). It draws what the server sends and sends what the user
// changes; every rule (limits, validation, which settings a block took) is the server's. Plain ES module, no build.
//
// Server -> page: the websocket events sdvg.live.start / block / settings / end (to every open page).
// Page -> server: POST /sdvg/live/{run_id}/control (JSON), POST /sdvg/live/{run_id}/frame (one JPEG camera frame),
// GET /sdvg/live/runs (a page opened mid-run). Each run's state and figures are kept in window.__sdvgLive[run_id]
// (`stats`: what the page measured: commit-to-draw latency, stalls, frames drawn, camera frames sent and dropped).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const NODE_TYPE = "SDVGLive";
const EVENT = { start: "sdvg.live.start", block: "sdvg.live.block", settings: "sdvg.live.settings",
                end: "sdvg.live.end" };
const ROUTE = "/sdvg/live";
// The jitter buffer: playback (re)starts once this many frames are decoded (a quarter second at 16 fps); a block
// arrives whole (12 frames), so a slow block shows as a pause after its predecessor, never as a skipped frame.
const JITTER_FRAMES = 4;
const DECODE_AHEAD = 24;      // frames decoded ahead of the one on screen (the rest wait as compressed JPEGs)
const STRIP_BLOCKS = 48;      // blocks shown in the strip of who made each block
const TAU_SLIDER = [-5, 5];   // the node's tau widget range; the number box takes any value the server accepts
const STRENGTH_SLIDER = [0.05, 1, 0.05];  // the node's strength widget
const CAMERA_JPEG_QUALITY = 0.85;
const SLIDER_DEBOUNCE_MS = 200;  // a dragged slider sends its value once it rests this long (or on release)
const COLORS = { drafter: "#3fb950", target: "#f0883e", forced: "#8b949e" };

const runs = (window.__sdvgLive = window.__sdvgLive || {});  // run_id -> {start, settings, blocks, end, stats}
const panels = new Set();

// ------------------------------------------------------------------------------------------------ run state
function newStats() {
  return { blocksReceived: 0, blocksDrawn: 0, framesDrawn: 0, latencies: [], stalls: 0, stallSeconds: 0,
           playSeconds: 0, blocksPerSecond: null, realtimeBlocksPerSecond: null, cameraSent: 0, cameraAccepted: 0,
           cameraDroppedPage: 0, cameraDroppedServer: 0, cameraReceivedServer: 0, serverDropped: 0, errors: [],
           controls: [] };
}

function runOf(runId, start) {
  let run = runs[runId];
  if (!run) {
    run = runs[runId] = { runId, start: null, settings: null, blocks: [], end: null, stats: newStats() };
  }
  if (start) {
    run.start = start;
    run.settings = run.settings || start.settings;
  }
  return run;
}

function graphNodes() {
  const g = app.graph;
  return (g && (g._nodes || g.nodes)) || [];
}

function panelFor(run) {
  // the node the run names; else the only SDVG Live node of the workflow open in this page (a tab with another copy)
  const nodeId = run.start ? String(run.start.node) : null;
  const all = [...panels].filter(p => p.node.graph);
  return all.find(p => String(p.node.id) === nodeId) || (all.length === 1 ? all[0] : null);
}

function route(runId, what) {
  return `${ROUTE}/${encodeURIComponent(runId)}/${what}`;
}

async function post(runId, what, body, headers) {
  const r = await api.fetchApi(route(runId, what), { method: "POST", body, headers });
  let data = {};
  try { data = await r.json(); } catch (e) { data = { error: `the server answered ${r.status} without JSON` }; }
  return { ok: r.ok, status: r.status, data };
}

// ------------------------------------------------------------------------------------------------ the player
class Player {
  // Frames of committed blocks, drawn in block order at the run's fps; never skips or reorders a frame.
  constructor(canvas, onFrame) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.onFrame = onFrame;  // (entry, firstOfBlock) after a frame is drawn
    this.reset(null);
  }

  reset(run) {
    clearTimeout(this.timer);
    this.run = run;
    this.queue = [];        // {block, index, blob, bitmap, decoding, meta}
    this.lastBlock = -1;    // the newest block queued (a block at or before it is not queued again)
    this.playing = false;   // frames are being drawn on the clock
    this.started = false;   // the first frame was drawn
    this.stalledAt = null;  // performance.now() when the buffer ran dry mid-run
    this.timer = null;
    this.nextAt = 0;
  }

  get fps() { return (this.run && this.run.start && this.run.start.fps) || 16; }

  push(meta, frames) {
    if (meta.block <= this.lastBlock) return;  // already queued or played: never drawn twice or out of order
    this.lastBlock = meta.block;
    frames.forEach((b64, index) => {
      const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
      this.queue.push({ block: meta.block, index, blob: new Blob([bytes], { type: "image/jpeg" }), bitmap: null,
                        decoding: false, meta });
    });
    this.decode();
    this.kick();
  }

  decode() {
    for (const e of this.queue.slice(0, DECODE_AHEAD)) {
      if (e.bitmap || e.decoding) continue;
      e.decoding = true;
      createImageBitmap(e.blob).then(bm => { e.bitmap = bm; this.kick(); },
                                     err => { e.bitmap = "bad"; console.warn("SDVG Live: a frame did not decode", err); this.kick(); });
    }
  }

  ready() {
    let n = 0;
    for (const e of this.queue) { if (!e.bitmap) break; n++; }
    return n;
  }

  kick() {
    // start or resume the clock once the jitter buffer holds enough decoded frames (or the run ended)
    if (this.playing || !this.queue.length) return;
    const ended = !!(this.run && this.run.end);
    if (this.ready() >= Math.min(JITTER_FRAMES, this.queue.length) || (ended && this.ready() > 0)) {
      if (this.stalledAt !== null && this.run) {
        this.run.stats.stallSeconds += (performance.now() - this.stalledAt) / 1000;
      }
      this.stalledAt = null;
      this.playing = true;
      this.nextAt = performance.now();
      this.tick();
    }
  }

  tick() {
    const e = this.queue[0];
    if (!e || !e.bitmap) {  // the buffer ran dry: a pause (a stall while the run goes on), never a skipped frame
      this.playing = false;
      if (this.run && !this.run.end && this.started) {
        this.run.stats.stalls += 1;
        this.stalledAt = performance.now();
      }
      this.onFrame(null, false);
      return;
    }
    this.queue.shift();
    if (e.bitmap !== "bad") {
      const { width, height } = e.bitmap;
      if (this.canvas.width !== width || this.canvas.height !== height) {
        this.canvas.width = width;
        this.canvas.height = height;
      }
      this.ctx.drawImage(e.bitmap, 0, 0);
      e.bitmap.close && e.bitmap.close();
    }
    this.started = true;
    this.onFrame(e, e.index === 0);
    this.decode();
    const period = 1000 / this.fps;
    this.nextAt += period;
    const now = performance.now();
    if (this.nextAt < now - period) this.nextAt = now;  // a late timer shifts the clock; it never drops a frame
    this.timer = setTimeout(() => this.tick(), Math.max(0, this.nextAt - now));
  }

  stop() {
    clearTimeout(this.timer);
    this.playing = false;
  }
}

// ------------------------------------------------------------------------------------------------ the camera
class Camera {
  // The browser's camera, previewed on the panel; while a camera run is on, frames at the run's size and fps go
  // to POST /frame, at most one request in flight (a frame due while one is in flight is dropped and counted).
  constructor(video, onChange) {
    this.video = video;
    this.onChange = onChange;
    this.stream = null;
    this.timer = null;
    this.inFlight = false;
    this.canvas = document.createElement("canvas");
  }

  get on() { return !!this.stream; }

  async toggle() {
    if (this.stream) return this.off();
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({ video: true, audio: false });
    } catch (e) {
      this.onChange(`camera: ${e.message || e.name || e}`);
      return;
    }
    this.video.srcObject = this.stream;
    await this.video.play().catch(() => {});
    this.onChange(null);
  }

  off() {
    this.stopSending();
    if (this.stream) this.stream.getTracks().forEach(t => t.stop());
    this.stream = null;
    this.video.srcObject = null;
    this.onChange(null);
  }

  send(run) {
    // send to `run` (its start event says camera: true) until stopSending
    this.stopSending();
    this.run = run;
    const period = 1000 / (run.start.fps || 16);
    let next = performance.now();
    const loop = () => {
      if (this.run !== run || run.end) return;
      if (this.stream && this.video.readyState >= 2) this.frame(run);
      next += period;
      const now = performance.now();
      if (next < now - period) next = now;
      this.timer = setTimeout(loop, Math.max(0, next - now));
    };
    loop();
  }

  stopSending() {
    clearTimeout(this.timer);
    this.run = null;
  }

  frame(run) {
    const s = run.stats;
    if (this.inFlight) { s.cameraDroppedPage += 1; return; }
    const { width, height } = run.start;
    const c = this.canvas;
    c.width = width;
    c.height = height;
    // the camera picture centre-cropped to the run's aspect and scaled to its size
    const vw = this.video.videoWidth, vh = this.video.videoHeight;
    const scale = Math.max(width / vw, height / vh);
    const sw = width / scale, sh = height / scale;
    c.getContext("2d").drawImage(this.video, (vw - sw) / 2, (vh - sh) / 2, sw, sh, 0, 0, width, height);
    this.inFlight = true;
    c.toBlob(async blob => {
      try {
        const r = await post(run.runId, "frame", blob, { "Content-Type": "image/jpeg" });
        s.cameraSent += 1;
        if (r.ok) {
          if (r.data.accepted) s.cameraAccepted += 1;
          s.cameraReceivedServer = r.data.received;
          s.cameraDroppedServer = r.data.dropped;
        } else if (r.status !== 404) {
          s.errors.push(`frame: ${r.data.error || r.status}`);
        }
      } catch (e) {
        s.errors.push(`frame: ${e.message || e}`);
      } finally {
        this.inFlight = false;
      }
    }, "image/jpeg", CAMERA_JPEG_QUALITY);
  }
}

// ------------------------------------------------------------------------------------------------ the panel
const CSS = `
.sdvg-live { display: flex; flex-direction: column; gap: 4px; font: 12px/1.35 sans-serif; color: var(--input-text, #ddd);
  box-sizing: border-box; padding: 2px; overflow: hidden; }
.sdvg-live > * { flex: 0 0 auto; }
.sdvg-live > .screen { position: relative; flex: 1 1 auto; min-height: 120px; background: #000; border-radius: 4px;
  overflow: hidden; display: flex; align-items: center; justify-content: center; }
.sdvg-live > .screen canvas { width: 100%; height: 100%; object-fit: contain; image-rendering: auto; }
.sdvg-live .screen video { position: absolute; right: 4px; bottom: 4px; width: 25%; border: 1px solid #fff8;
  border-radius: 3px; display: none; }
.sdvg-live .idle { position: absolute; inset: 0; display: flex; align-items: center; justify-content: center;
  text-align: center; padding: 12px; color: #aaa; }
.sdvg-live .caption { display: flex; gap: 6px; align-items: center; min-height: 18px; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; }
.sdvg-live .who { padding: 0 6px; border-radius: 3px; color: #000; font-weight: bold; }
.sdvg-live .strip { display: flex; gap: 1px; height: 12px; }
.sdvg-live .strip div { flex: 0 0 auto; width: 9px; border-radius: 1px; opacity: 0.85; }
.sdvg-live .strip div.now { outline: 2px solid #fff; opacity: 1; }
.sdvg-live .strip div.changed { border-top: 3px solid #58a6ff; box-sizing: border-box; }
.sdvg-live .stats { display: flex; flex-wrap: wrap; gap: 2px 10px; color: var(--descrip-text, #999); }
.sdvg-live .stats b { color: var(--input-text, #ddd); font-weight: normal; }
.sdvg-live .row { display: flex; gap: 6px; align-items: center; }
.sdvg-live .row > label { flex: 0 0 58px; color: var(--descrip-text, #999); }
.sdvg-live input[type=range] { flex: 1 1 auto; min-width: 60px; }
.sdvg-live input[type=number] { width: 64px; }
.sdvg-live select, .sdvg-live input[type=text] { flex: 1 1 auto; min-width: 0; }
.sdvg-live input, .sdvg-live select, .sdvg-live button { background: var(--comfy-input-bg, #222);
  color: var(--input-text, #ddd); border: 1px solid var(--border-color, #444); border-radius: 4px; font-size: 12px;
  padding: 2px 6px; }
.sdvg-live button:disabled, .sdvg-live input:disabled, .sdvg-live select:disabled { opacity: 0.45; }
.sdvg-live button.stop { border-color: #f85149; }
.sdvg-live button.on { border-color: #3fb950; color: #3fb950; }
.sdvg-live .note { color: var(--descrip-text, #999); font-size: 11px; }
.sdvg-live .confirmed { color: var(--descrip-text, #999); font-size: 11px; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
.sdvg-live .error { color: #f85149; font-size: 11px; }
.sdvg-live a { color: #58a6ff; }
`;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function fmt(x, digits = 2) {
  return x === null || x === undefined || Number.isNaN(x) ? "-" : Number(x).toFixed(digits);
}

function outputUrl(path) {
  // a file under the output folder, as ComfyUI's /view serves it
  const i = path.lastIndexOf("/");
  const q = new URLSearchParams({ filename: path.slice(i + 1), subfolder: i < 0 ? "" : path.slice(0, i),
                                  type: "output" });
  return api.apiURL(`/view?${q}`);
}

class Panel {
  constructor(node) {
    this.node = node;
    this.run = null;
    this.shown = null;  // the block whose frames are on screen
    this.lastSent = {};
    this.build();
    this.player = new Player(this.canvas, (entry, first) => this.onFrame(entry, first));
    this.camera = new Camera(this.video, err => this.onCamera(err));
    this.widget = node.addDOMWidget("sdvg_live", "sdvg_live", this.root, {
      serialize: false, hideOnZoom: false, getMinHeight: () => 470, getValue: () => "", setValue: () => {} });
    this.render();
  }

  build() {
    const c = (cls, tag = "div") => el(tag, { class: cls });
    this.root = el("div", { class: "sdvg-live" });
    this.canvas = el("canvas", { width: 64, height: 36 });
    this.video = el("video", { muted: "", playsinline: "" });
    this.video.muted = true;
    this.idle = el("div", { class: "idle", text: "Queue the workflow: the video plays here as its blocks commit." });
    this.screen = el("div", { class: "screen" }, this.canvas, this.video, this.idle);
    this.caption = c("caption");
    this.strip = c("strip");
    this.stats = c("stats");
    // tau: a slider over the node's range and a number box for any value
    this.tauRange = el("input", { "data-control": "tau", type: "range", min: TAU_SLIDER[0], max: TAU_SLIDER[1], step: 0.01, value: -0.7,
                                  title: "tau: a draft is kept when its lowest frame score is >= tau" });
    this.tauBox = el("input", { "data-control": "tau-number", type: "number", step: 0.01, value: -0.7, title: "tau (any number)" });
    let debounce = null;
    this.tauRange.addEventListener("input", () => {
      this.tauBox.value = this.tauRange.value;
      clearTimeout(debounce);
      debounce = setTimeout(() => this.send({ tau: Number(this.tauRange.value) }, "tau"), SLIDER_DEBOUNCE_MS);
    });
    this.tauRange.addEventListener("change", () => {
      clearTimeout(debounce);
      this.send({ tau: Number(this.tauRange.value) }, "tau");
    });
    this.tauBox.addEventListener("change", () => {
      const v = this.tauBox.value.trim() === "" ? null : Number(this.tauBox.value);
      this.send({ tau: v }, "tau");
    });
    // the prompt: one of the prepared ones (instant), or a typed one (the run's CLIP encodes it)
    this.promptSelect = el("select", { "data-control": "prompt", title: "the prompts prepared before the run (switching is instant)" });
    this.promptSelect.addEventListener("change", () => {
      const i = Number(this.promptSelect.value);
      if (Number.isInteger(i) && i >= 0) this.send({ prompt_index: i }, "prompt");
    });
    this.promptText = el("input", { "data-control": "prompt-text", type: "text", placeholder: "type a new prompt, Enter to send" });
    this.promptSend = el("button", { "data-control": "prompt-send", text: "Send", onclick: () => this.sendTyped() });
    this.promptText.addEventListener("keydown", e => { if (e.key === "Enter") this.sendTyped(); e.stopPropagation(); });
    this.promptNote = c("note");
    this.drafter = el("input", { "data-control": "drafter", type: "checkbox", title: "drafter on: the drafter proposes, ImageReward decides" });
    this.drafter.checked = true;
    this.drafter.addEventListener("change", () => this.send({ drafter: this.drafter.checked }, "drafter"));
    this.strengthRange = el("input", { "data-control": "strength", type: "range", min: STRENGTH_SLIDER[0], max: STRENGTH_SLIDER[1],
                                       step: STRENGTH_SLIDER[2], value: 0.7,
                                       title: "strength: how far each camera block is noised" });
    this.strengthValue = el("span", { text: "0.70" });
    let sdebounce = null;
    this.strengthRange.addEventListener("input", () => {
      this.strengthValue.textContent = fmt(this.strengthRange.value);
      clearTimeout(sdebounce);
      sdebounce = setTimeout(() => this.send({ strength: Number(this.strengthRange.value) }, "strength"),
                             SLIDER_DEBOUNCE_MS);
    });
    this.strengthRange.addEventListener("change", () => {
      clearTimeout(sdebounce);
      this.send({ strength: Number(this.strengthRange.value) }, "strength");
    });
    this.strengthRow = el("div", { class: "row" }, el("label", { text: "strength" }), this.strengthRange,
                          this.strengthValue);
    this.cameraButton = el("button", { "data-control": "camera", text: "Camera", title: "your camera as the input of a run with input camera",
                                       onclick: () => this.camera.toggle() });
    this.stopButton = el("button", { "data-control": "stop", class: "stop", text: "Stop", title: "end the run after the block in progress",
                                     onclick: () => this.send({ stop: true }, "stop") });
    this.replayButton = el("button", { "data-control": "replay", text: "Replay", title: "put this run's report in 'replay': queue again for "
                                                              + "the same video, bit for bit",
                                       onclick: () => this.setReplay() });
    this.confirmed = c("confirmed");
    this.error = c("error");
    this.files = c("note");
    this.root.append(
      this.screen, this.caption, this.strip, this.stats,
      el("div", { class: "row" }, el("label", { text: "tau" }), this.tauRange, this.tauBox),
      el("div", { class: "row" }, el("label", { text: "prompt" }), this.promptSelect),
      el("div", { class: "row" }, el("label", { text: "" }), this.promptText, this.promptSend),
      this.promptNote,
      this.strengthRow,
      el("div", { class: "row" }, el("label", { text: "drafter" }), this.drafter, this.cameraButton, this.stopButton,
         this.replayButton),
      this.confirmed, this.files, this.error);
    // keys typed into the panel stay in it (the canvas would take them as shortcuts)
    this.root.addEventListener("keydown", e => e.stopPropagation());
  }

  // ---------------------------------------------------------------------------------------------- run events
  attach(run) {
    if (this.run !== run) {
      this.run = run;
      this.shown = null;
      this.player.reset(run);
      this.error.textContent = "";
      this.lastSent = {};
      if (run.start && run.start.camera && this.camera.on) this.camera.send(run);
    }
    this.syncControls(run.settings);
    this.render();
  }

  onBlock(run, meta, frames) {
    if (this.run !== run) this.attach(run);
    if (frames && frames.length) this.player.push(meta, frames);
    this.render();
  }

  onEnd(run) {
    if (this.camera.run === run) this.camera.stopSending();
    this.player.kick();  // play what is buffered to its end
    this.render();
  }

  onFrame(entry, first) {
    const run = this.run;
    if (entry && run) {
      const s = run.stats;
      s.framesDrawn += 1;
      s.playSeconds = s.framesDrawn / this.player.fps;
      if (first) {
        s.blocksDrawn += 1;
        const meta = entry.meta;
        const t = Date.now() / 1000;
        meta.t_draw = t;
        if (typeof meta.t_commit === "number") s.latencies.push(t - meta.t_commit);
        this.shown = meta;
        this.render();
      }
    } else {
      this.render();
    }
  }

  onCamera(err) {
    if (err) this.error.textContent = err;
    const run = this.run;
    if (this.camera.on && run && run.start && run.start.camera && !run.end) this.camera.send(run);
    this.render();
  }

  // ---------------------------------------------------------------------------------------------- sending
  async send(body, what) {
    const run = this.run;
    if (!run || run.end || !run.start) {
      this.error.textContent = "no live run is in progress on this node: queue the workflow first";
      return null;
    }
    const t = Date.now() / 1000;
    const lastBlock = run.blocks.length ? run.blocks[run.blocks.length - 1].block : -1;
    let r;
    try {
      r = await post(run.runId, "control", JSON.stringify(body), { "Content-Type": "application/json" });
    } catch (e) {
      this.error.textContent = `${what}: ${e.message || e}`;
      return null;
    }
    // what was sent, when, and after which committed block (the figures and the tests read this)
    run.stats.controls.push({ body, t, after_block: lastBlock, status: r.status,
                              version: r.ok ? r.data.settings.version : null, error: r.ok ? null : r.data.error });
    if (!r.ok) {
      this.error.textContent = `${what}: ${r.data.error || `the server answered ${r.status}`}`;
      run.stats.errors.push(this.error.textContent);
      this.syncControls(run.settings);  // back to what the server holds
      return r;
    }
    this.error.textContent = "";
    this.onSettings(run, r.data.settings);
    return r;
  }

  sendTyped() {
    const text = this.promptText.value;
    this.send({ prompt: text }, "prompt").then(r => { if (r && r.ok) this.promptText.value = ""; });
  }

  onSettings(run, settings) {
    if (!run.settings || settings.version >= run.settings.version) run.settings = settings;
    if (this.run === run) {
      this.syncControls(run.settings);
      this.render();
    }
  }

  syncControls(s) {
    if (!s) return;
    const focused = document.activeElement;
    if (focused !== this.tauBox && focused !== this.tauRange) {
      this.tauBox.value = s.tau;
      this.tauRange.value = Math.min(TAU_SLIDER[1], Math.max(TAU_SLIDER[0], s.tau));
    }
    this.drafter.checked = !!s.drafter;
    if (s.strength !== null && s.strength !== undefined && focused !== this.strengthRange) {
      this.strengthRange.value = s.strength;
      this.strengthValue.textContent = fmt(s.strength);
    }
    const prepared = (this.run && this.run.start && this.run.start.prepared) || [];
    const i = prepared.indexOf(s.prompt);
    this.promptSelect.value = String(i);
  }

  replayWidget() {
    return (this.node.widgets || []).find(w => w.name === "replay");
  }

  setReplay() {
    // the ended run's report into the node's `replay` widget (queue again to replay it); pressed again: cleared
    const run = this.run, w = this.replayWidget();
    if (!w) return;
    if (w.value) w.value = "";
    else if (run && run.end && run.end.report) w.value = run.end.report;
    else return;
    w.callback && w.callback(w.value);
    this.node.setDirtyCanvas && this.node.setDirtyCanvas(true, true);
    this.render();
  }

  // ---------------------------------------------------------------------------------------------- drawing
  render() {
    const run = this.run, start = run && run.start, s = run && run.stats;
    const live = !!(start && !run.end);
    this.idle.style.display = s && s.framesDrawn ? "none" : "flex";
    if (start && !(s && s.framesDrawn)) {
      this.idle.textContent = run.end ? `The run ended (${run.end.reason}) before a frame was drawn.`
        : start.camera && !this.camera.on ? "This run reads your camera: press Camera (it waits 30 s for frames)."
        : `Run started: ${start.width}x${start.height}, waiting for block 0...`;
    }
    this.video.style.display = this.camera.on ? "block" : "none";
    this.cameraButton.classList.toggle("on", this.camera.on);
    this.cameraButton.textContent = this.camera.on ? "Camera on" : "Camera";
    // the block on screen: who made it, its score against the tau it was decided with, the settings it took
    this.caption.replaceChildren();
    const b = this.shown;
    if (b) {
      const who = b.decision === "forced" ? "forced" : b.producer;
      const verdict = b.score === null || b.score === undefined || b.tau === null || b.tau === undefined
        ? (b.decision === "forced" ? (b.block === 0 ? "block 0 is the target's" : "drafter off") : b.decision)
        : `score ${fmt(b.score)} ${b.score >= b.tau ? ">=" : "<"} tau ${fmt(b.tau)} (${b.decision})`;
      this.caption.append(
        el("span", { text: `block ${b.block + 1}/${b.max_blocks}` }),
        el("span", { class: "who", text: b.producer, style: `background:${COLORS[who] || COLORS.forced}` }),
        el("span", { text: verdict }),
        el("span", { class: "note", text: `v${b.settings_version} "${(b.prompt || "").slice(0, 40)}"`,
                     title: `this block took the settings of change ${b.settings_version}: prompt "${b.prompt}", `
                            + `policy ${b.policy}${b.strength !== null ? `, strength ${b.strength}` : ""}` }));
    } else if (start) {
      this.caption.append(el("span", { class: "note", text: start.replay ? "a replay: the controls do nothing"
                                                                       : "" }));
    }
    // the strip: a cell per block (newest last), coloured by who made it; a blue top where the settings changed
    this.strip.replaceChildren();
    if (run) {
      const blocks = run.blocks.slice(-STRIP_BLOCKS);
      let prev = run.blocks.length > blocks.length ? run.blocks[run.blocks.length - blocks.length - 1] : null;
      for (const m of blocks) {
        const who = m.decision === "forced" ? "forced" : m.producer;
        const cell = el("div", { title: `block ${m.block}: ${m.producer} (${m.decision}), score ${fmt(m.score)}, `
                                        + `tau ${fmt(m.tau)}, settings v${m.settings_version}` });
        cell.style.background = COLORS[who] || COLORS.forced;
        if (prev && prev.settings_version !== m.settings_version) cell.classList.add("changed");
        if (b && m.block === b.block) cell.classList.add("now");
        this.strip.append(cell);
        prev = m;
      }
    }
    // the figures: tau now, the pace against real time, the buffer, stalls, latency, camera frames
    this.stats.replaceChildren();
    if (run && start) {
      const lat = s.latencies.length ? s.latencies[s.latencies.length - 1] : null;
      const buffered = this.player.queue.length / this.player.fps;
      const items = [
        ["tau", fmt(run.settings && run.settings.tau)],
        ["blocks/s", `${fmt(s.blocksPerSecond)} (real time ${fmt(s.realtimeBlocksPerSecond)})`],
        ["buffer", `${fmt(buffered, 1)} s`],
        ["stalls", `${s.stalls}`],
        ["commit to screen", lat === null ? "-" : `${fmt(lat)} s`],
      ];
      if (start.camera) {
        items.push(["camera", `${s.cameraSent} sent, ${s.cameraDroppedPage} dropped here, `
                              + `${s.cameraDroppedServer} dropped by the run`]);
      }
      for (const [k, v] of items) this.stats.append(el("span", {}, `${k} `, el("b", { text: v })));
    }
    // controls: usable while a live (not replayed) run is in progress on this node
    const can = live && !start.replay;
    for (const e of [this.tauRange, this.tauBox, this.drafter, this.stopButton]) e.disabled = !can;
    const prepared = (start && start.prepared) || [];
    if (this.promptSelect.options.length !== prepared.length
        || [...this.promptSelect.options].some((o, i) => o.textContent !== prepared[i])) {
      this.promptSelect.replaceChildren(...prepared.map((p, i) => el("option", { value: String(i), text: p })));
      if (run && run.settings) this.promptSelect.value = String(prepared.indexOf(run.settings.prompt));
    }
    this.promptSelect.disabled = !can || !start.can_switch_prompts || prepared.length < 2;
    const typed = can && start.can_switch_prompts && start.encodes_prompts;
    this.promptText.disabled = this.promptSend.disabled = !typed;
    this.promptNote.textContent = !start ? ""
      : !start.can_switch_prompts ? "this run's recipe cannot change the prompt (krea and longlive can)"
      : !start.encodes_prompts ? "typed prompts need a CLIP on the node's 'clip' input; the prepared ones switch"
      : "";
    const hasStrength = !!(run && run.settings && run.settings.strength !== null && run.settings.strength !== undefined);
    this.strengthRow.style.display = hasStrength ? "flex" : "none";
    this.strengthRange.disabled = !can || !hasStrength;
    const replay = this.replayWidget();
    const replaying = !!(replay && replay.value);
    this.replayButton.textContent = replaying ? "Clear replay" : "Replay";
    this.replayButton.disabled = !replaying && !(run && run.end && run.end.report && run.end.blocks > 0);
    const st = run && run.settings;
    this.confirmed.textContent = st
      ? `server holds (change ${st.version}): tau ${fmt(st.tau)}, drafter ${st.drafter ? "on" : "off"}, `
        + `prompt "${(st.prompt || "").slice(0, 60)}"${st.strength !== null && st.strength !== undefined
          ? `, strength ${fmt(st.strength)}` : ""}${st.stop ? ", stopping after this block" : ""}`
      : "";
    this.files.replaceChildren();
    if (run && run.end) {
      const ended = { stopped: "stopped", finished: "finished at max_blocks", ended: "the input ended",
                      error: "cancelled or failed" }[run.end.reason] || run.end.reason;
      this.files.append(`${run.end.blocks} blocks, ${ended}: `);
      if (run.end.blocks > 0) {
        this.files.append(el("a", { href: outputUrl(run.end.video), target: "_blank", text: run.end.video }),
                          ` · report ${run.end.report}`);
      }
    } else if (start) {
      this.files.textContent = `saving as it goes: output/${start.folder}/`;
    }
    if (replaying && (!run || run.end)) this.files.append(` · the next queue replays ${replay.value}`);
  }

  remove() {
    this.player.stop();
    this.camera.off();
    panels.delete(this);
  }
}

// ------------------------------------------------------------------------------------------------ events
function onStart(d) {
  const run = runOf(d.run_id, d);
  const p = panelFor(run);
  if (p) p.attach(run);
}

function onBlock(d) {
  const run = runOf(d.run_id);
  const { frames, ...meta } = d;
  meta.t_recv = Date.now() / 1000;
  run.blocks.push(meta);
  run.stats.blocksReceived += 1;
  run.stats.blocksPerSecond = d.blocks_per_second;
  run.stats.realtimeBlocksPerSecond = d.realtime_blocks_per_second;
  run.stats.serverDropped = d.dropped_frames;
  if (!run.start) return;  // a run this page did not see start (and GET /runs has not answered yet)
  const p = panelFor(run);
  if (p) p.onBlock(run, meta, frames || []);
}

function onSettingsEvent(d) {
  const run = runOf(d.run_id);
  const p = panelFor(run);
  if (p && p.run === run) p.onSettings(run, d.settings);
  else if (!run.settings || d.settings.version >= run.settings.version) run.settings = d.settings;
}

function onEnd(d) {
  const run = runOf(d.run_id);
  run.end = d;
  const p = panelFor(run);
  if (p && p.run === run) p.onEnd(run);
}

async function catchUp() {
  // a page opened mid-run: the runs in progress, their settings and newest blocks (frames come with the next block)
  try {
    const r = await api.fetchApi(`${ROUTE}/runs`);
    if (!r.ok) return;
    for (const info of (await r.json()).runs || []) {
      const { recent, settings, ...start } = info;
      const run = runOf(start.run_id, start);
      if (settings) run.settings = settings;
      if (!run.blocks.length) run.blocks = (recent || []).map(m => ({ ...m }));
      const p = panelFor(run);
      if (p && !p.run) {
        p.attach(run);
        if (run.blocks.length) p.shown = run.blocks[run.blocks.length - 1];
        p.render();
      }
    }
  } catch (e) {
    console.warn("SDVG Live: the runs in progress could not be read", e);
  }
}

function ensureStyle() {
  if (document.getElementById("sdvg-live-style")) return;
  document.head.append(el("style", { id: "sdvg-live-style", text: CSS }));
}

app.registerExtension({
  name: "SDVG.Live",
  // init, not setup: a frontend runs init before it registers the node types and setup after, so a host whose
  // registration throws (the pip build 0.12.1: two core nodes without python_module) never runs setup
  async init() {
    ensureStyle();
    api.addEventListener(EVENT.start, e => onStart(e.detail));
    api.addEventListener(EVENT.block, e => onBlock(e.detail));
    api.addEventListener(EVENT.settings, e => onSettingsEvent(e.detail));
    api.addEventListener(EVENT.end, e => onEnd(e.detail));
    await catchUp();
  },
  nodeCreated(node) {
    if (node.comfyClass !== NODE_TYPE && node.type !== NODE_TYPE) return;
    ensureStyle();
    const panel = new Panel(node);
    panels.add(panel);
    node.__sdvgLive = panel;
    const removed = node.onRemoved;
    node.onRemoved = function () {
      panel.remove();
      return removed && removed.apply(this, arguments);
    };
    // a run in progress on this node (the workflow was opened or reloaded while it runs)
    setTimeout(() => {
      if (panel.run) return;
      const active = Object.values(runs).filter(r => r.start && !r.end && panelFor(r) === panel);
      if (active.length) panel.attach(active[active.length - 1]);
    }, 0);
  },
});
