// The fila console's one script (served from the binary; the pages work
// without it). Every two seconds, while the tab is visible, it fetches the
// page again and swaps in the parts marked data-live, so counts, charts
// and a redrive's progress move by themselves. The new parts come from the
// server's escaped HTML, parsed by DOMParser into an inert document (no
// script in it runs) and moved in as nodes: nothing is built from strings
// here, and no text a client chose is ever evaluated.
"use strict";
(function () {
  const PERIOD_MS = 2000;
  let busy = false;
  async function refresh() {
    if (busy || document.hidden || !document.querySelector("[data-live]")) return;
    const active = document.activeElement;
    if (active && active.closest && active.closest("[data-live] form")) return;
    busy = true;
    try {
      const r = await fetch(location.href, {
        credentials: "same-origin",
        headers: { "X-Fila-Live": "1" },
        redirect: "error",
      });
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      for (const fresh of doc.querySelectorAll("[data-live][id]")) {
        const old = document.getElementById(fresh.id);
        if (old) old.replaceWith(document.importNode(fresh, true));
      }
      document.documentElement.dataset.refreshed = String(Date.now());
    } catch (_) {
      // The server went away or the session ended: the next try tells.
    } finally {
      busy = false;
    }
  }
  setInterval(refresh, PERIOD_MS);
})();
