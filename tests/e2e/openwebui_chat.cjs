// Asks one question through Open WebUI's UI in headless Chromium and reports what it shows.
//
//   node openwebui_chat.cjs '{"url": "http://127.0.0.1:8080", "model": "citeflow-e2e",
//                             "question": "...", "artifacts": "/abs/dir"}'
//
// Needs PLAYWRIGHT_CORE (the path of an installed playwright-core) and CHROMIUM (default
// /usr/bin/chromium). Every request that is not to 127.0.0.1 is aborted. Prints one JSON object
// on stdout: the chat's URL, the answer's text, its inline citation chips, the text of the popup
// each chip opens, the sources list (toggle label and items), and the same after a reload of the
// chat's URL. The assertions are the caller's (tests/e2e/test_openwebui.py). On failure: exit 1,
// with a screenshot and the page's HTML in the artifacts directory.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { chromium } = require(process.env.PLAYWRIGHT_CORE || 'playwright-core');

const config = JSON.parse(process.argv[2]);
const TIMEOUT = config.timeoutMs || 60000;
const CHIP = 'button[aria-label^="View source: "]:not([id^="source-"])';
const LIST_ITEM = 'button[id^="source-"]';
const TOGGLE = 'button[aria-label^="Toggle "][aria-expanded]';

const log = (...args) => console.error('[browser]', ...args);

async function lastResponse(page) {
  const container = page.locator('#response-content-container').last();
  await container.waitFor({ state: 'visible', timeout: TIMEOUT });
  return container;
}

async function waitForDone(page) {
  // Open WebUI shows the message's copy button once the answer is complete (message.done).
  await page.locator('.copy-response-button').last().waitFor({ state: 'visible', timeout: TIMEOUT });
  return lastResponse(page);
}

async function chips(container) {
  const found = container.locator(CHIP);
  const out = [];
  for (let i = 0; i < (await found.count()); i++) {
    const chip = found.nth(i);
    out.push({ label: await chip.getAttribute('aria-label'), text: (await chip.innerText()).trim() });
  }
  return out;
}

async function openPopup(page, chip) {
  await chip.click();
  const dialog = page.locator('[role="dialog"]').filter({
    has: page.locator('button[aria-label="Close citation modal"]'),
  });
  await dialog.waitFor({ state: 'visible', timeout: 10000 });
  const link = dialog.locator('a[target="_blank"]').first();
  const popup = {
    text: await dialog.innerText(),
    href: (await link.count()) ? await link.getAttribute('href') : null,
  };
  await dialog.locator('button[aria-label="Close citation modal"]').click();
  await dialog.waitFor({ state: 'hidden', timeout: 10000 });
  return popup;
}

async function popups(page, container) {
  // one popup per distinct chip label, in the order of the chips
  const found = container.locator(CHIP);
  const seen = new Map();
  for (let i = 0; i < (await found.count()); i++) {
    const label = await found.nth(i).getAttribute('aria-label');
    if (!seen.has(label)) seen.set(label, await openPopup(page, found.nth(i)));
  }
  return [...seen.entries()].map(([label, popup]) => ({ label, ...popup }));
}

async function sourcesList(container) {
  const toggle = container.locator(TOGGLE);
  if ((await toggle.count()) === 0) return { toggle: null, items: [] };
  const label = await toggle.first().getAttribute('aria-label');
  if ((await toggle.first().getAttribute('aria-expanded')) !== 'true') await toggle.first().click();
  const items = container.locator(LIST_ITEM);
  await items.first().waitFor({ state: 'visible', timeout: 10000 });
  const out = [];
  for (let i = 0; i < (await items.count()); i++) {
    const item = items.nth(i);
    out.push({
      id: await item.getAttribute('id'),
      label: await item.getAttribute('aria-label'),
      text: (await item.innerText()).replace(/\s+/g, ' ').trim(),
    });
  }
  return { toggle: label, items: out };
}

async function observe(page) {
  const container = await waitForDone(page);
  // the chips render with the final text; give a late source event no chance to be missed
  await container.locator(CHIP).first().waitFor({ state: 'visible', timeout: 10000 }).catch(() => {});
  return {
    answer: (await container.locator(':scope > *').first().innerText()).trim(),
    chips: await chips(container),
    popups: await popups(page, container),
    sources: await sourcesList(container),
  };
}

async function main() {
  fs.mkdirSync(config.artifacts, { recursive: true });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const aborted = new Set();
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if (url.hostname === '127.0.0.1' || url.protocol === 'data:' || url.protocol === 'blob:') {
      return route.continue();
    }
    aborted.add(url.origin);
    return route.abort();
  });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const consoleErrors = [];
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(message.text());
  });
  page.on('pageerror', (error) => consoleErrors.push(String(error)));

  try {
    await page.goto(`${config.url}/?models=${encodeURIComponent(config.model)}`);
    const input = page.locator('#chat-input');
    const welcome = page.getByRole('button', { name: "Okay, Let's Go!" });
    await Promise.race([
      input.waitFor({ state: 'visible' }),
      welcome.waitFor({ state: 'visible' }),
    ]);
    // the release-notes dialog comes up a moment after the page: give it that moment
    await welcome.waitFor({ state: 'visible', timeout: 3000 }).catch(() => {});
    if (await welcome.isVisible()) {
      await welcome.click();
      await welcome.waitFor({ state: 'hidden' });
    }
    await input.click();
    await page.keyboard.type(config.question);
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/c\/[^/?#]+/, { timeout: TIMEOUT });
    log('asked; chat at', page.url());

    const live = await observe(page);
    const chatUrl = page.url();
    await page.screenshot({ path: path.join(config.artifacts, 'answer.png'), fullPage: true });
    log('answer:', JSON.stringify(live.answer));

    // the saved chat, freshly loaded from Open WebUI's server
    await page.reload();
    if (page.url() !== chatUrl) throw new Error(`reloaded at ${page.url()}, not ${chatUrl}`);
    const reloaded = await observe(page);
    await page.screenshot({ path: path.join(config.artifacts, 'reloaded.png'), fullPage: true });

    process.stdout.write(
      JSON.stringify({
        chatUrl,
        live,
        reloaded,
        abortedOrigins: [...aborted],
        consoleErrors,
      }) + '\n',
    );
  } catch (error) {
    await page.screenshot({ path: path.join(config.artifacts, 'failure.png'), fullPage: true })
      .catch(() => {});
    fs.writeFileSync(path.join(config.artifacts, 'failure.html'), await page.content().catch(() => ''));
    fs.writeFileSync(path.join(config.artifacts, 'console.log'), consoleErrors.join('\n'));
    log('FAILED at', page.url(), '\n', error.stack || String(error));
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
