// Keeps a page current while the station runs: polls /api/live and updates the elements
// marked data-live (state, progress, tick, limit), replaces the parts marked data-live-html with the
// server's fresh rendering of them (escaped there), prepends new events, and appends an open
// dialogue's new turns. No library.
(function () {
  // a page served under a prefix (a multistart's /branch/N/) says so: its addresses are under it
  const root = document.documentElement.dataset.root || "";
  let lastEvent = 0;
  const events = document.querySelector("[data-live=events]");
  const parts = Array.from(document.querySelectorAll("[data-live-html]"));
  const wanted = parts.length ? "&html=" + parts.map(function (el) { return el.dataset.liveHtml; }).join(",") : "";
  if (events && events.firstElementChild) lastEvent = Number(events.firstElementChild.dataset.id) || 0;
  const everything = events && events.dataset.everything === "1" ? "&everything=1" : "";
  // One event as a list item: text nodes only (never HTML), a link only to a page of this site.
  function eventItem(e) {
    const li = document.createElement("li");
    li.dataset.id = e.id;
    li.dataset.kind = e.kind;
    li.append("tick " + e.tick + " · ");
    if (typeof e.href === "string" && /^\/[a-z]/.test(e.href)) {
      const a = document.createElement("a");
      a.href = e.href;
      a.textContent = e.text;
      li.append(a);
    } else {
      li.append(e.text);
    }
    return li;
  }
  function set(name, text) {
    document.querySelectorAll("[data-live=" + name + "]").forEach(function (el) { el.textContent = text; });
  }
  async function poll() {
    try {
      const answer = await fetch(root + "/api/live?after=" + lastEvent + everything + wanted, {headers: {accept: "application/json"}});
      if (answer.status === 401) {  // the login ended (logged out elsewhere, or expired): say so, stop asking
        set("state", "logged out: reload the page to log in again");
        return;
      }
      if (answer.ok) {
        const live = await answer.json();
        set("state", live.state);
        set("tick", live.tick);
        set("limit", live.limit || "");
        parts.forEach(function (el) {
          const html = (live.html || {})[el.dataset.liveHtml];
          if (html !== undefined) el.innerHTML = html;
        });
        if (live.last) set("progress", "tick " + live.last.tick + (live.last.agent ? " · " + live.last.agent : ""));
        if (events) {
          live.events.slice().reverse().forEach(function (e) {
            events.prepend(eventItem(e));
            lastEvent = Math.max(lastEvent, e.id);
          });
          while (events.children.length > 60) events.lastElementChild.remove();
        } else if (live.events.length) {
          lastEvent = Math.max(lastEvent, live.events[0].id);
        }
      }
      const dialogue = document.querySelector("[data-live-append]");
      if (dialogue) {
        const more = await fetch(dialogue.dataset.liveAppend + "?after=" + dialogue.dataset.after);
        const html = more.ok ? await more.text() : "";
        if (html.trim()) {
          dialogue.querySelectorAll(".empty").forEach(function (el) { el.remove(); });
          dialogue.insertAdjacentHTML("beforeend", html);
          const turns = dialogue.querySelectorAll("article.turn");
          dialogue.dataset.after = turns[turns.length - 1].id.replace("tick-", "");
        }
      }
    } catch (err) { /* the server may be restarting: try again later */ }
    setTimeout(poll, 2000);
  }
  if (location.protocol !== "file:") setTimeout(poll, 2000);
})();
