// Live updates for the run page: poll the page's /live/ twin and swap in what changed.
// No inline script anywhere (the content security policy forbids it); this file is all.
"use strict";

(function () {
  const region = document.querySelector("main[data-live]");
  const status = document.getElementById("live-status");
  const PERIOD_MS = 1000;

  // A second click on an answer must not send a second answer: the store refuses it
  // anyway, and the page says so, but the button says it first.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.dataset.sent) {
      event.preventDefault();
      return;
    }
    form.dataset.sent = "1";
    window.setTimeout(function () {
      for (const button of form.querySelectorAll("button")) {
        button.disabled = true;
      }
    }, 0); // after the submitter's name and value went into the form's data
  });

  if (!region || !region.dataset.live) {
    return;
  }

  function say(text, tone) {
    if (status) {
      status.textContent = text;
      status.className = "live " + tone;
    }
  }

  // While the page cannot reach its server, what it shows may be stale and an answer
  // may not arrive: the answer buttons are off, each form says why, until it is back.
  function answerable(on, why) {
    for (const form of document.querySelectorAll("form.answer")) {
      let note = form.querySelector(".offline");
      if (on) {
        if (note) {
          note.remove();
        }
      } else {
        if (!note) {
          note = document.createElement("p");
          note.className = "offline";
          note.setAttribute("role", "status");
          form.appendChild(note);
        }
        note.textContent = "Answers are off: " + why + ".";
      }
      for (const button of form.querySelectorAll("button")) {
        if (on && button.dataset.offline) {
          delete button.dataset.offline;
          button.removeAttribute("title");
          button.disabled = Boolean(form.dataset.sent); // a sent form stays off
        } else if (!on && !button.disabled) {
          button.dataset.offline = "1";
          button.title = "Answers are off: " + why;
          button.disabled = true;
        }
      }
    }
  }

  // Put each element of a fragment in place: over the element with its id, or into its
  // data-parent in data-order. Open <details> stay open.
  function merge(html) {
    const parsed = new DOMParser().parseFromString(html, "text/html");
    const open = new Set(
      Array.from(document.querySelectorAll("details[open]"), function (d) {
        const holder = d.closest("[id]");
        return holder ? holder.id : "";
      })
    );
    for (const node of Array.from(parsed.body.children)) {
      if (!node.id) {
        continue;
      }
      const fresh = document.importNode(node, true);
      const old = document.getElementById(node.id);
      if (old) {
        old.replaceWith(fresh);
      } else if (fresh.dataset.parent) {
        const parent = document.getElementById(fresh.dataset.parent);
        if (!parent) {
          continue;
        }
        const order = Number(fresh.dataset.order);
        const after = Array.from(parent.children).find(function (child) {
          return Number(child.dataset.order) > order;
        });
        parent.insertBefore(fresh, after || null);
      }
      if (open.has(fresh.id)) {
        for (const d of fresh.querySelectorAll("details")) {
          d.open = true;
        }
      }
    }
  }

  async function poll() {
    const url = region.dataset.live + "?since=" + encodeURIComponent(region.dataset.version);
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (response.status === 200) {
        merge(await response.text());
        region.dataset.version = response.headers.get("x-stockade-version") || "";
        say("live", "ok");
        answerable(true, "");
      } else if (response.status === 204) {
        say("live", "ok");
        answerable(true, "");
      } else {
        const why = "the server answered " + response.status;
        say("not updating (" + response.status + "): reopen the URL stockade ui printed", "bad");
        answerable(false, why + "; reopen the URL stockade ui printed");
      }
    } catch (error) {
      say("not updating: the server is gone", "bad");
      answerable(false, "the page cannot reach its server; they come back when it does");
    }
    window.setTimeout(poll, PERIOD_MS);
  }

  say("live", "ok");
  window.setTimeout(poll, PERIOD_MS);
})();
