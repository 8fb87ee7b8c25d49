#!/usr/bin/env bash
# Debian's headless Chromium for the page test in a real browser (tests/test_page.py), where it can be had: on a
# machine with apt-get, as root (CI's). Elsewhere it says so and the browser test skips; it never fails the run.
if command -v chromium >/dev/null; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) > /tmp/chromium-install.log 2>&1 \
    && echo "chromium: $(chromium --version 2>/dev/null)" && exit 0
fi
echo "no Chromium here (apt-get install chromium as root): the page test in a real browser is skipped"
