// flowpark console: the few live parts on top of server-rendered pages.
// Every page reads the same without this file; it only adds countdowns and stream messages.
(function () {
  "use strict";

  function formatSeconds(total) {
    const sign = total < 0 ? "-" : "";
    let s = Math.abs(Math.round(total));
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (h) return sign + h + "h " + String(m).padStart(2, "0") + "m " + String(s).padStart(2, "0") + "s";
    if (m) return sign + m + "m " + String(s).padStart(2, "0") + "s";
    return sign + s + "s";
  }

  // <span class="countdown" data-until="2026-01-01T00:00:00Z">: seconds to (or past) an instant
  function tick() {
    const now = Date.now();
    document.querySelectorAll("[data-until]").forEach(function (el) {
      const until = Date.parse(el.getAttribute("data-until"));
      if (isNaN(until)) return;
      const left = (until - now) / 1000;
      el.textContent = left >= 0 ? "in " + formatSeconds(left) : formatSeconds(-left) + " late";
      el.classList.toggle("late", left < 0);
    });
  }

  // <ol data-stream-url="..."> : append each Server-Sent Event's message
  function follow(list) {
    if (list.dataset.following) return;
    list.dataset.following = "1";
    const source = new EventSource(list.getAttribute("data-stream-url"));
    source.onmessage = function (event) {
      const item = document.createElement("li");
      try {
        const message = JSON.parse(event.data);
        item.textContent = message.createdAt + "  " + JSON.stringify(message.value);
      } catch (e) {
        item.textContent = event.data;
      }
      list.appendChild(item);
      const empty = list.parentElement.querySelector(".stream-empty");
      if (empty) empty.remove();
    };
    source.addEventListener("end", function () { source.close(); });
  }

  // a box that scrolls sideways (a wide table on a phone, the timeline, the graph) gets a
  // line above it saying so, shown only while its content is wider than the box
  function hintScrolling() {
    document.querySelectorAll("main table, main .scroll, main [data-testid$='-scroll']").forEach(function (box) {
      if (getComputedStyle(box).overflowX !== "auto") return;
      let hint = box.previousElementSibling;
      if (!hint || !hint.classList.contains("scroll-hint")) {
        hint = document.createElement("p");
        hint.className = "scroll-hint";
        hint.setAttribute("data-testid", "scroll-hint");
        hint.textContent = "\u2194 wider than the screen: scroll sideways for more";
        box.parentNode.insertBefore(hint, box);
      }
      hint.hidden = box.scrollWidth <= box.clientWidth + 1;
    });
  }

  function start() {
    tick();
    hintScrolling();
    document.querySelectorAll("ol[data-stream-url]").forEach(follow);
  }

  setInterval(tick, 1000);
  window.addEventListener("resize", hintScrolling);
  document.addEventListener("DOMContentLoaded", start);
  document.addEventListener("htmx:afterSettle", start);
})();
