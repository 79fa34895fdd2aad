// The Granary dashboard: renders the cluster report of the silo that
// serves this page, live. Reports come from the event stream; when the
// stream fails, the page polls the report instead and tries the stream
// again now and then. Every text from a report goes in through
// textContent, never as HTML.
//
// When the admin server answers 401 (it has admin.token_file), the page
// shows a form for the token, keeps it in sessionStorage (this tab only)
// and sends it as "Authorization: Bearer". The stream is read with
// fetch rather than EventSource, which cannot send that header: a token
// in the URL would land in access logs and the browser's history.
//
// One feed loop runs at a time: startStream and poll hand over to each
// other, and needToken ends the loop until the form starts it again.
'use strict';

(function () {
  const STREAM_URL = 'api/v1/cluster/sse';
  const REPORT_URL = 'api/v1/cluster';
  const POLL_MS = 2000;
  // While polling, the stream is tried again after this many polls.
  const POLLS_BEFORE_STREAM_RETRY = 15;
  // TOKEN_KEY names the admin token in sessionStorage.
  const TOKEN_KEY = 'granary-admin-token';

  function storedToken() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (err) {
      return ''; // storage refused (a sandboxed frame): no token
    }
  }

  function storeToken(token) {
    try {
      if (token) window.sessionStorage.setItem(TOKEN_KEY, token);
      else window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (err) {
      // Without storage the token lasts only as long as this variable.
    }
    memoryToken = token;
    document.getElementById('forget').hidden = !token;
  }

  // memoryToken stands in for sessionStorage where it is refused.
  let memoryToken = storedToken();

  // headers are a request's: what it accepts, and the token when there
  // is one.
  function headers(accept) {
    const h = { Accept: accept };
    const token = storedToken() || memoryToken;
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  // el makes an element with a class and a text, both optional.
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // cell makes a table cell; num aligns it as a number.
  function cell(text, num) {
    return el('td', num ? 'num' : '', text);
  }

  // fill replaces the rows of the table with id by rows, or by one row
  // saying empty when there are none.
  function fill(id, rows, empty) {
    const table = document.getElementById(id);
    const body = table.tBodies[0];
    if (rows.length === 0) {
      const td = el('td', 'empty', empty);
      td.colSpan = table.tHead.rows[0].cells.length;
      const tr = el('tr');
      tr.appendChild(td);
      body.replaceChildren(tr);
      return;
    }
    body.replaceChildren(...rows);
  }

  function row(cells) {
    const tr = el('tr');
    for (const c of cells) tr.appendChild(c);
    return tr;
  }

  function rate(x) {
    if (!x) return '0';
    return x >= 100 ? x.toFixed(0) : x.toFixed(1);
  }

  function duration(seconds) {
    let s = Math.max(0, Math.floor(seconds || 0));
    const d = Math.floor(s / 86400);
    s -= d * 86400;
    const h = Math.floor(s / 3600);
    s -= h * 3600;
    const m = Math.floor(s / 60);
    s -= m * 60;
    if (d > 0) return d + 'd ' + h + 'h';
    if (h > 0) return h + 'h ' + m + 'm';
    if (m > 0) return m + 'm ' + s + 's';
    return s + 's';
  }

  function clock(t) {
    const d = t instanceof Date ? t : new Date(t);
    return isNaN(d) ? '' : d.toLocaleTimeString();
  }

  // badge shows a silo's status in its colour.
  function badge(status) {
    const known = ['joining', 'active', 'shutting-down', 'stopped'];
    const kind = known.includes(status) ? status : 'unknown';
    return el('span', 'badge badge-' + kind, status || 'unknown');
  }

  // sheddingBadge marks a silo that refuses new requests for load, its
  // overload counters in the tooltip; null for a silo that does not shed.
  function sheddingBadge(o) {
    if (!o || !o.shedding) return null;
    const b = el('span', 'badge badge-shedding', 'shedding load');
    b.title = 'refusing new requests: CPU use or Go heap over its limit\n' +
      'shed requests: ' + (o.shed_requests || 0) + '\n' +
      'queue warnings: ' + (o.queue_warnings || 0) + ', refusals: ' + (o.queue_refusals || 0) + '\n' +
      'memory collections: ' + (o.memory_collections || 0) + '\n' +
      'abandoned turns: ' + (o.abandoned_turns || 0);
    return b;
  }

  function addresses(a) {
    const list = el('span', 'addresses');
    const parts = [['gossip', a.gossip], ['grpc', a.grpc], ['gateway', a.gateway], ['admin', a.admin]];
    for (const [label, addr] of parts) {
      if (!addr) continue;
      const item = el('span', 'address');
      item.appendChild(el('span', 'address-label', label));
      item.appendChild(document.createTextNode(' ' + addr));
      list.appendChild(item);
    }
    return list;
  }

  // limitBadge marks a silo that runs fewer new requests at once to keep
  // their latency under its limit; null for a silo that limits none.
  function limitBadge(o) {
    if (!o || !o.concurrency_limit) return null;
    const b = el('span', 'badge badge-shedding', 'limited to ' + o.concurrency_limit);
    b.title = 'running at most ' + o.concurrency_limit + ' new requests at once, to keep their latency under its limit\n' +
      'running now: ' + (o.concurrency || 0) + '\n' +
      'refused at the limit: ' + (o.limit_refusals || 0);
    return b;
  }

  function renderSilos(report) {
    const rows = (report.silos || []).map(function (s) {
      const status = el('td');
      status.appendChild(badge(s.status));
      const shedding = sheddingBadge(s.overload);
      if (shedding) status.appendChild(shedding);
      const limited = limitBadge(s.overload);
      if (limited) status.appendChild(limited);
      const addr = el('td');
      addr.appendChild(addresses(s.addresses || {}));
      const tr = row([
        cell(s.name), cell(s.member || '—'), status,
        cell(s.activations, true), cell(s.queued_turns, true),
        cell(duration(s.uptime_seconds), true), addr,
      ]);
      tr.dataset.silo = s.name;
      if (s.member === report.asked || (!s.member && s.name === report.asked)) tr.className = 'asked';
      return tr;
    });
    fill('silos', rows, 'no silo reported');

    const down = report.unreachable || [];
    document.getElementById('unreachable').hidden = down.length === 0;
    fill('unreachable', down.map(function (u) {
      const tr = row([cell(u.member), cell(u.admin || '—'), cell(u.error)]);
      tr.dataset.member = u.member;
      return tr;
    }), '');
  }

  function renderTypes(report) {
    fill('types', (report.types || []).map(function (t) {
      const errors = cell(rate(t.error_rate), true);
      if (t.error_rate > 0) errors.classList.add('bad');
      return row([cell(t.type), cell(t.activations, true), cell(rate(t.call_rate), true), errors]);
    }), 'no grain types registered');
  }

  function renderHot(report) {
    fill('hot', (report.hot || []).map(function (h) {
      return row([cell(h.grain), cell(h.silo), cell(rate(h.call_rate), true)]);
    }), 'no calls in the last interval');
  }

  function renderErrors(report) {
    fill('errors', (report.errors || []).map(function (e) {
      return row([
        cell(clock(e.time)), cell(e.grain), cell(e.method),
        el('td', 'code', e.code), el('td', 'message', e.message), cell(e.silo || ''),
      ]);
    }), 'no recent errors');
  }

  // parkedBadge marks a parked subscription, since when in the tooltip;
  // the reason follows it in the cell.
  function parkedBadge(sub) {
    const b = el('span', 'badge badge-parked', 'parked');
    b.title = 'delivery failed past the provider\'s retries and stopped until unparked' +
      (sub.parked_at ? '\nsince ' + clock(sub.parked_at) : '');
    return b;
  }

  // subscriptionStatus is the status cell of a subscription: parked with
  // its reason, else delivering while events wait, else caught up.
  function subscriptionStatus(sub) {
    const td = el('td', 'stream-status');
    if (sub.parked) {
      td.appendChild(parkedBadge(sub));
      if (sub.parked_reason) td.appendChild(el('span', 'message', ' ' + sub.parked_reason));
    } else {
      td.appendChild(el('span', sub.lag > 0 ? 'badge badge-delivering' : 'badge badge-caught-up',
        sub.lag > 0 ? 'delivering' : 'caught up'));
    }
    return td;
  }

  // renderStreams shows the streams that most need an operator, one row
  // a subscription, the stream's name and silo spanning its rows; the
  // panel is hidden while no silo runs streams.
  function renderStreams(report) {
    const s = report.streams;
    document.getElementById('streams-panel').hidden = !s;
    if (!s) return;
    document.getElementById('streams-active').textContent = String(s.active || 0);
    document.getElementById('streams-subscriptions').textContent = String(s.subscriptions || 0);
    const parked = document.getElementById('streams-parked');
    parked.textContent = String(s.parked || 0);
    parked.className = s.parked > 0 ? 'bad' : '';
    document.getElementById('streams-lag').textContent = String(s.lag || 0);
    document.getElementById('streams-published').textContent = rate(s.publish_rate);
    document.getElementById('streams-delivered').textContent = rate(s.delivery_rate);
    document.getElementById('streams-dropped').textContent = rate(s.drop_rate);

    const rows = [];
    for (const st of s.top || []) {
      const subs = st.subscriptions || [];
      const more = (st.subscription_count || 0) - subs.length;
      const span = Math.max(1, subs.length + (more > 0 ? 1 : 0));
      const name = cell(st.stream);
      name.title = (st.type ? 'events: ' + st.type + '\n' : '') + 'last event: ' + (st.last || 'none');
      const silo = cell(st.silo);
      // The stream's cells span its subscriptions' rows, and take no
      // parked row's colour.
      for (const c of [name, silo]) {
        c.rowSpan = span;
        c.classList.add('spans');
      }
      const first = [name, silo];
      if (subs.length === 0 && more <= 0) {
        const none = el('td', 'empty', 'no subscriptions');
        none.colSpan = 5;
        const tr = row(first.concat([none]));
        tr.dataset.stream = st.stream;
        rows.push(tr);
        continue;
      }
      subs.forEach(function (sub, i) {
        const tr = row((i === 0 ? first : []).concat([
          el('td', 'subscription', sub.id), cell(sub.grain), cell(sub.handler + (sub.implicit ? ' (implicit)' : '')),
          cell(sub.lag, true), subscriptionStatus(sub),
        ]));
        tr.dataset.stream = st.stream;
        tr.dataset.subscription = sub.id;
        if (sub.parked) tr.classList.add('parked');
        rows.push(tr);
      });
      if (more > 0) {
        const td = el('td', 'empty', '+' + more + ' more subscription' + (more === 1 ? '' : 's') + ': granaryctl streams lag --prefix ' + st.stream);
        td.colSpan = 5;
        const tr = row(subs.length === 0 ? first.concat([td]) : [td]);
        tr.dataset.stream = st.stream;
        rows.push(tr);
      }
    }
    fill('streams', rows, 'no active streams');
  }

  function renderTotals(report) {
    let activations = 0;
    let calls = 0;
    let errors = 0;
    for (const s of report.silos || []) activations += s.activations || 0;
    for (const t of report.types || []) {
      calls += t.call_rate || 0;
      errors += t.error_rate || 0;
    }
    document.getElementById('total-silos').textContent = String((report.silos || []).length);
    document.getElementById('total-activations').textContent = String(activations);
    document.getElementById('total-calls').textContent = rate(calls);
    document.getElementById('total-errors').textContent = rate(errors);
  }

  function render(report) {
    document.getElementById('asked').textContent = report.asked || '—';
    document.getElementById('updated').textContent = clock(new Date());
    document.title = 'Granary · ' + (report.asked || location.host);
    renderTotals(report);
    renderSilos(report);
    renderTypes(report);
    renderHot(report);
    renderStreams(report);
    renderErrors(report);
    showProblem('');
  }

  function setFeed(state) {
    const feed = document.getElementById('feed');
    feed.textContent = state;
    feed.className = 'badge badge-feed-' + state;
  }

  function showProblem(text) {
    const p = document.getElementById('problem');
    p.textContent = text;
    p.hidden = !text;
  }

  // The feed: the event stream, or polling while the stream fails.
  let polls = 0;

  // needToken stops the feed and shows the token form; a stored token the
  // server refused is dropped.
  function needToken(refused) {
    const had = storedToken() || memoryToken;
    storeToken('');
    setFeed('locked');
    showProblem(had && refused ? 'the admin server refused the token: ' + refused : '');
    const form = document.getElementById('login');
    form.hidden = false;
    document.getElementById('token').focus();
  }

  // errorText reads an API error's message from a response.
  async function errorText(resp) {
    const body = await resp.json().catch(function () { return null; });
    return resp.status + ' ' + ((body && body.message) || resp.statusText);
  }

  // startStream reads the event stream until it ends or fails, then
  // polls; a 401 asks for a token instead.
  async function startStream() {
    if (!window.fetch || !window.ReadableStream || !window.TextDecoder) {
      poll();
      return;
    }
    let resp;
    try {
      resp = await fetch(STREAM_URL, { cache: 'no-store', headers: headers('text/event-stream') });
    } catch (err) {
      fallBack();
      return;
    }
    if (resp.status === 401) {
      needToken(await errorText(resp));
      return;
    }
    if (!resp.ok || !resp.body) {
      fallBack();
      return;
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const chunk = await reader.read();
        if (chunk.done) break;
        buf += decoder.decode(chunk.value, { stream: true }); // the server ends lines with \n alone
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = event.split('\n')
            .filter(function (line) { return line.startsWith('data:'); })
            .map(function (line) { return line.slice(5).replace(/^ /, ''); })
            .join('\n');
          if (!data) continue; // the retry: line, or a comment
          setFeed('live');
          try {
            render(JSON.parse(data));
          } catch (err) {
            showProblem('bad report from the event stream: ' + err.message);
          }
        }
      }
    } catch (err) {
      // The stream broke: poll instead.
    }
    fallBack();
  }

  function fallBack() {
    polls = 0;
    poll();
  }

  async function poll() {
    setFeed('polling');
    try {
      const resp = await fetch(REPORT_URL, { cache: 'no-store', headers: headers('application/json') });
      if (resp.status === 401) {
        needToken(await errorText(resp));
        return;
      }
      if (!resp.ok) {
        throw new Error(await errorText(resp));
      }
      render(await resp.json());
    } catch (err) {
      setFeed('offline');
      showProblem('cannot reach ' + REPORT_URL + ': ' + err.message);
    }
    polls++;
    if (polls >= POLLS_BEFORE_STREAM_RETRY) {
      startStream();
      return;
    }
    setTimeout(poll, POLL_MS);
  }

  document.getElementById('login').addEventListener('submit', function (ev) {
    ev.preventDefault(); // the page sends the token itself; nothing navigates
    const input = document.getElementById('token');
    const token = input.value.trim();
    if (!token) return;
    input.value = '';
    storeToken(token);
    document.getElementById('login').hidden = true;
    showProblem('');
    setFeed('connecting');
    startStream();
  });

  document.getElementById('forget').addEventListener('click', function () {
    storeToken('');
    window.location.reload();
  });
  document.getElementById('forget').hidden = !memoryToken;

  startStream();
})();
